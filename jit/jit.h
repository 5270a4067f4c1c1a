// volt::jit — trace a function or module into prims, transform the trace, run it.
//
//   auto jm = volt::jit::jit(model);          // shares model's parameters
//   Tensor y = jm(x);                         // first call traces, later calls hit the cache
//   for (auto& t : volt::jit::last_traces(jm)) std::cout << t.str();
//
// When the call needs gradients the trace is differentiated symbolically into
// an augmented forward and a backward trace; loss.backward() runs the backward
// trace and accumulates into the shared parameters' .grad.  Both go through
// the compile pipeline (jit/pipeline.h): executors claim ops, elementwise runs
// become fused kernels, the rewrites of jit/rewrites/ apply unless switched off.
//
// Threads: one JitFunction may be called from several threads at once.  A
// call looks its entry up under a lock, compiles (one compile at a time per
// function; a thread that waited re-checks the cache first, so one key is
// compiled once) and then runs, without the lock, the entry it found or made,
// whatever other threads store meanwhile.  cache_hits() + cache_misses() is
// the number of calls.  last_traces(), last_backward_traces(),
// last_miss_reason() and compile_stats() describe the most recent lookup of
// any thread; read them when no other thread is calling.  Gradients that
// several threads' backward() accumulate into shared parameters race as they
// do in eager mode.
#pragma once
#include <atomic>
#include <concepts>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <volt/jit/executor.h>
#include <volt/jit/executor_registry.h>
#include <volt/jit/grad_transform.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/trace.h>

namespace volt::jit {

// Metadata: reuse a compiled trace while every input's shape, dtype, device and
// requires_grad (and any value the trace read) are the same.  None: trace and
// compile on every call (for debugging the jit itself).
enum class CacheMode { Metadata, None };

// A trace that read a value (a guard) is kept per value read: at most this
// many entries per input signature, the least recently used dropped first.
inline constexpr size_t kMaxGuardedEntries = 8;
// After this many compiles of one signature because a guard failed, one
// warning names the guard's source and the rewrite that avoids it.
inline constexpr int kGuardWarnAfter = 4;

struct JitOptions {
  // Tried in this order before the built-in executors (cpu-fusion, eager).
  std::vector<std::reference_wrapper<Executor>> executors;
  CacheMode cache = CacheMode::Metadata;
  // The compile pipeline's rewrites (jit/pipeline.h): pipeline.rewrites = false
  // (or VOLT_JIT_REWRITES=0) compiles the plain trace.
  PipelineOptions pipeline{};
  // What reports call the function (jit(module) sets the module's type name).
  std::string name;
  // Mixed precision: the autocast transform to bf16 or f16 (jit/autocast.h).
  // Unset, a call made under an AutocastGuard (tensor/autocast.h) takes the
  // guard's type; either way the type is part of the cache key.
  std::optional<DType> autocast{};
};

// What a call returns: the function's outputs, or (grad transforms) the
// gradients of its inputs.
enum class CallTransform { None, Grad, ValueAndGrad, Vjp };

class JitFunction {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  // `captured` are tensors fn uses without taking them as arguments (parameters).
  JitFunction(Fn fn, std::vector<std::string> input_names, std::vector<Tensor> captured = {},
              std::vector<std::string> captured_names = {},
              std::function<bool()> training_flag = nullptr, JitOptions options = {});

  // The same function under a grad transform (see grad() below); a fresh cache.
  JitFunction transformed(CallTransform t) const;
  // The same function under the autocast transform to `low` (jit/autocast.h); a fresh cache.
  JitFunction with_autocast(DType low) const;

  std::vector<Tensor> operator()(const std::vector<Tensor>& args);
  // One tensor in, the first output out: f(x). A template, so that braces,
  // f({x}), always mean the overload above (the inputs in a vector) and never
  // a Tensor copied from {x}, whose [0] would be a row of the output.
  template <class T>
    requires std::same_as<std::remove_cvref_t<T>, Tensor>
  Tensor operator()(T&& x) {
    return (*this)(std::vector<Tensor>{std::forward<T>(x)}).at(0);
  }
  // A vjp transform's call (see vjp() below): primals, then one cotangent per output.
  std::vector<Tensor> operator()(const std::vector<Tensor>& primals, const std::vector<Tensor>& cotangents);

  const std::vector<Trace>& last_traces() const;
  // JitOptions::name: "MLP" for a jitted MLP, "" for an unnamed function.
  const std::string& name() const { return options_.name; }
  // The backward traces of the last call (empty when it needed no gradient).
  const std::vector<Trace>& last_backward_traces() const;
  int64_t cache_hits() const { return state_->hits; }
  int64_t cache_misses() const { return state_->misses; }
  // Why the last miss happened ("first call", or the field that differed).
  const std::string& last_miss_reason() const { return state_->miss_reason; }
  // How many entries the cache holds (every metadata key and guard outcome).
  size_t cache_entries() const;

  struct CompileStats {
    std::vector<std::pair<std::string, double>> passes;  // pass name, milliseconds
    double total_ms = 0;
    int fusions = 0;
    int kernels = 0;  // distinct kernels among the fusions (equal keys share one: jit/codegen.h)
  };
  // What the last cache miss cost, pass by pass (forward and backward).
  CompileStats compile_stats() const;

  // One cached entry as a report shows it (jit/inspect/report.h).
  struct EntryInfo {
    std::string key;     // the readable cache key
    std::string reason;  // why it was compiled
    int64_t compile = 0;  // 1 for this function's first compile, 2 for its second, ...
    int64_t hits = 0;     // calls it served from the cache
    std::vector<Trace> traces, backward_traces;
  };
  // Every entry the cache holds, in the order they were compiled (with
  // caching off: the last compile's).
  std::vector<EntryInfo> entry_infos() const;
  // Why each compile happened, oldest first ("compile 2: input0=... (was ...)"); the last 256.
  std::vector<std::string> miss_history() const;

 private:
  struct Entry {
    std::shared_ptr<ProxyNames> names;
    std::vector<Guard> guards;           // values the trace read, checked on every hit
    std::vector<Trace> traces;           // one per pass; the last one runs
    std::vector<Trace> backward_traces;  // when the call needs gradients
    std::vector<int> grad_input_index;   // backward output k is the grad of input grad_input_index[k]
    size_t num_outputs = 0;
    std::string key, reason;  // for reports
    int64_t compile = 0;
    std::atomic<int64_t> hits{0};
  };
  // n_primals: for vjp, how many of args are primals (the rest are cotangents).
  std::vector<Tensor> call(const std::vector<Tensor>& args, size_t n_primals);
  std::vector<Tensor> run_with_grad(const std::shared_ptr<Entry>& e, const std::vector<Tensor>& inputs);
  std::string key_for(const std::vector<Tensor>& args, size_t n_primals) const;  // readable, for miss reasons
  uint64_t hash_for(const std::vector<Tensor>& args, size_t n_primals) const;     // the same fields, hashed
  // low: the autocast type, if any (jit/autocast.h).
  std::shared_ptr<Entry> compile(const std::vector<Tensor>& args, size_t n_primals, std::optional<DType> low);
  // The autocast type a call made now gets: the options', else the thread's AutocastGuard's.
  std::optional<DType> autocast_now() const;
  // The first entry of this key whose guards hold, or null; locks state_->mutex itself.
  std::shared_ptr<Entry> lookup(uint64_t hash, const std::string& key, const std::vector<Tensor>& inputs,
                                std::string* guard_failure);
  bool guards_hold(const Entry& e, const std::vector<Tensor>& inputs, std::string* why) const;

  Fn fn_;
  std::vector<std::string> input_names_;
  std::vector<Tensor> captured_;
  std::vector<std::string> captured_names_;
  std::function<bool()> training_;
  JitOptions options_;
  std::vector<Executor*> executors_;  // the user's, then the built-in ones
  CallTransform transform_ = CallTransform::None;
  // Entries with the same metadata differ by their guards.
  struct Bucket {
    std::string key;  // hashes can collide: the readable key confirms a hit
    std::vector<std::shared_ptr<Entry>> entries;  // most recently used first
    int guard_recompiles = 0;  // misses because a guard failed
    bool warned = false;
  };
  static std::string guard_warning(const Entry& e, const std::string& reason);
  // The cache and counters, shared by copies of this JitFunction (transformed()
  // starts a fresh one).  `mutex` guards cache, last, last_key and
  // miss_reason; `compile_mutex` lets one compile run at a time.
  struct State {
    std::mutex mutex, compile_mutex;
    std::unordered_map<uint64_t, std::vector<Bucket>> cache;
    std::shared_ptr<Entry> last;
    std::string last_key, miss_reason;  // last_key: of the last compile
    std::vector<std::string> miss_history;
    std::atomic<int64_t> hits{0}, misses{0};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// Parameter names as traces print them: "0.weight" -> "_0_weight".
std::string proxy_name_for(const std::string& dotted);

// jit of a function of tensors.
inline JitFunction jit(JitFunction::Fn fn, std::vector<std::string> input_names = {}) {
  return JitFunction(std::move(fn), std::move(input_names));
}
inline JitFunction jit(JitFunction::Fn fn, JitOptions options, std::vector<std::string> input_names = {}) {
  return JitFunction(std::move(fn), std::move(input_names), {}, {}, nullptr, std::move(options));
}

// Grad transforms of a jitted function (of its tensor inputs, not of captured
// parameters): grad(f)(x...) returns d(sum of f's outputs)/dx for every
// floating-point input x; value_and_grad(f)(x...) returns f's outputs, then
// those gradients.  Both are traced into one program, printable like any other.
inline JitFunction grad(const JitFunction& f) { return f.transformed(CallTransform::Grad); }
inline JitFunction value_and_grad(const JitFunction& f) { return f.transformed(CallTransform::ValueAndGrad); }
// vjp(f)(primals, cotangents): f's outputs at the primals, then the
// vector-Jacobian products: for every floating-point primal x, the sum over
// outputs k of cotangents[k] times d(output k)/dx.  One cotangent per output,
// with its shape and dtype.  grad(f) is vjp(f) with cotangents of ones.
inline JitFunction vjp(const JitFunction& f) { return f.transformed(CallTransform::Vjp); }

// jit of a module: anything with forward(Tensor), named_parameters() and is_training().
template <class M>
JitFunction jit(std::shared_ptr<M> module, JitOptions options = {}) {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : module->named_parameters()) {
    params.push_back(p);
    names.push_back(proxy_name_for(name));
  }
  if constexpr (requires { module->type_name(); })
    if (options.name.empty()) options.name = module->type_name();
  // Called as a user calls it, so that a module's call can mark its lines (their scope).
  auto call = [module](const std::vector<Tensor>& in) {
    if constexpr (requires { (*module)(in.at(0)); }) return std::vector<Tensor>{(*module)(in.at(0))};
    else return std::vector<Tensor>{module->forward(in.at(0))};
  };
  return JitFunction(call, {"input"}, params, names, [module] { return module->is_training(); }, std::move(options));
}

inline const std::vector<Trace>& last_traces(const JitFunction& f) { return f.last_traces(); }
inline const std::vector<Trace>& last_backward_traces(const JitFunction& f) {
  return f.last_backward_traces();
}
inline int64_t cache_hits(const JitFunction& f) { return f.cache_hits(); }
inline int64_t cache_misses(const JitFunction& f) { return f.cache_misses(); }
inline JitFunction::CompileStats compile_stats(const JitFunction& f) { return f.compile_stats(); }
// The generated source of every fused kernel the last call ran (forward, then
// backward), readable: named as the trace names its values.
std::vector<std::string> last_kernel_sources(const JitFunction& f);
// The kernels themselves (key, compiled symbol and body, Philox base: jit/codegen.h).
std::vector<std::shared_ptr<const FusedKernel>> last_kernels(const JitFunction& f);

}  // namespace volt::jit
