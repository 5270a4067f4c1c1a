// volt::jit::compile_step — the whole training step as one compiled program.
//
//   auto step = volt::jit::compile_step([&](const Tensor& x, const Tensor& y) {
//     Tensor loss = volt::nn::cross_entropy((*net)(x), y);
//     opt.zero_grad();
//     loss.backward();
//     opt.step();
//     return loss;
//   }, {.state = {*net, opt}});
//   for (auto& [x, y] : loader) Tensor loss = step(x, y);
//
// The step is written as in eager mode and traced once per input shape:
// forward, loss, backward() (the VJP rules, recorded as prims) and the
// optimizer's update (step() runs on traced values and its in-place writes
// are recorded) become one trace.  Parameters, moments and the step count are
// state: inputs of the program whose new values are written back in place.
// Run-time scalars (the learning rate) are refilled before every call, so
// changing them does not recompile; a new input shape does, with its reason.
//
// A freeze (requires_grad_(false) on a parameter, or back) is part of the key:
// it recompiles, with the state tensor named in the reason.  The most recently
// used max_cached_shapes programs are kept, each with its arena; the least
// recently used is dropped, arena and all, when another shape comes.
//
// One CompiledStep may be called from several threads: calls take a mutex and
// run one at a time (they update the same parameters in place, so they could
// not overlap anyway).  The accessors (last_traces, compiles, ...) describe
// the last call and are for reading when no call is under way.
//
// On the CPU the program runs by a memory plan (jit/step/memory_plan.h): one arena
// per compiled step, every intermediate placed by liveness, state updated where
// it lives, no allocation per call after the first.  On a GPU the second call
// of a shape captures the program into a CUDA graph (jit/cuda/step_graph.h)
// that every later call replays with one launch.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/jit/jit.h>

namespace volt::jit {

// What a step updates or reads besides its arguments: a module (its
// parameters), an optimizer (its parameters, state_tensors() and
// run_time_scalars()), or a list of tensors.
struct StepState {
  using Scalar = std::pair<Tensor, std::function<double()>>;
  std::vector<Tensor> tensors;
  std::vector<std::string> names;   // how the trace names them (may be shorter)
  std::vector<Scalar> scalars;      // 0-d tensors refilled before every call
  std::function<bool()> training;   // a module's training flag: part of the cache key

  StepState(std::vector<Tensor> t) : tensors(std::move(t)) {}  // NOLINT: implicit on purpose
  template <class M>
    requires requires(M& m) { m.named_parameters(); m.is_training(); }
  StepState(M& module) {  // NOLINT
    for (auto& [name, p] : module.named_parameters()) {
      tensors.push_back(p);
      names.push_back(proxy_name_for(name));
    }
    training = [&module] { return module.is_training(); };
  }
  template <class O>
    requires requires(O& o) { o.state_tensors(); o.run_time_scalars(); o.params(); }
  StepState(O& optimizer) {  // NOLINT
    tensors = optimizer.params();
    for (const Tensor& t : optimizer.state_tensors()) tensors.push_back(t);
    for (auto& s : optimizer.run_time_scalars()) scalars.push_back(s);
  }
};

struct StepOptions {
  std::vector<StepState> state;
  // Leave each parameter's gradient in .grad after a call (costs a write of
  // every gradient); by default a compiled step leaves .grad undefined.
  bool write_grads = false;
  // Return the step's outputs in tensors the step owns and overwrites on the
  // next call (no allocation at all); by default each call returns fresh ones.
  bool reuse_outputs = false;
  // Run the program through its memory plan (else prim by prim, allocating).
  bool memory_plan = true;
  // On the CPU, apply the optimizer's update of a weight in the store of the
  // GEMM making its gradient (jit/rewrites/gemm_epilogue.h).
  bool gemm_epilogues = true;
  // On a GPU, replay the step as a CUDA graph from its second call on.
  bool cuda_graph = true;
  // How many compiled programs (input shapes, freezes, modes) are kept, the
  // least recently used dropped first with its arena; at least 1.  Each holds
  // an arena of its batch's activations, so a loader of many batch sizes
  // would otherwise keep them all.
  size_t max_cached_shapes = 16;
  // Mixed precision (tensor/autocast.h): the step is traced with autocast to
  // bf16 or f16 on, so its forward's GEMMs run in that type and its loss,
  // reductions, backward casts and optimizer in f32 on f32 master weights.
  // Unset, a call made under an AutocastGuard takes the guard's type; either
  // way the type is part of the cache key.
  std::optional<DType> autocast{};
  JitOptions jit{};
};

class CompiledStep {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  CompiledStep(Fn fn, StepOptions options);
  ~CompiledStep();
  CompiledStep(CompiledStep&&) noexcept;

  std::vector<Tensor> operator()(const std::vector<Tensor>& args);
  template <class... T>
    requires(std::is_convertible_v<T, Tensor> && ...)
  Tensor operator()(const T&... args) {
    return (*this)(std::vector<Tensor>{Tensor(args)...}).at(0);
  }

  // The traces of the last call's program, one per pass; the last one runs.
  const std::vector<Trace>& last_traces() const;
  // The last trace printed in sections: forward, loss, backward, optimizer.
  std::string last_trace_str() const;
  int64_t compiles() const { return compiles_; }
  // How many compiled programs are kept now (at most max_cached_shapes), and
  // the bytes of their arenas together.
  size_t cached_shapes() const { return cache_.size(); }
  size_t cached_arena_bytes() const;
  int64_t cache_hits() const { return hits_; }
  const std::string& last_miss_reason() const { return miss_reason_; }
  // What the last compilation cost (tracing and every pass), in milliseconds.
  double last_compile_ms() const;
  // Bytes of the last program's arena (0 without a memory plan).
  size_t arena_bytes() const;
  // The last call's CUDA graph, when it ran as one: its kernel and copy
  // nodes (both 0 otherwise).
  bool ran_as_graph() const;
  size_t graph_kernel_nodes() const;
  size_t graph_memcpy_nodes() const;

  struct Entry;

 private:
  std::string key_for(const std::vector<Tensor>& args) const;
  // What key_for says, as numbers (cheap to build and compare every call).
  void signature(const std::vector<Tensor>& args, std::vector<int64_t>& out) const;
  std::shared_ptr<Entry> compile(const std::vector<Tensor>& args, std::optional<DType> low);
  std::optional<DType> autocast_now() const;  // the options' autocast type, else the thread's guard's

  Fn fn_;
  StepOptions options_;
  std::vector<Tensor> state_;                 // deduplicated, scalars last
  std::vector<std::string> state_names_;
  std::vector<std::function<double()>> refill_;  // for the last refill_.size() of state_
  std::vector<double> refilled_;                 // the value each holds now (NaN: unknown)
  std::vector<Executor*> executors_;
  std::vector<std::pair<std::string, std::shared_ptr<Entry>>> cache_;  // most recently used first
  std::shared_ptr<Entry> last_;
  std::string last_key_, miss_reason_;
  std::vector<int64_t> last_signature_, signature_;
  std::vector<Tensor> inputs_;  // reused call to call
  int64_t compiles_ = 0, hits_ = 0;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // one call at a time
};

template <class F>
CompiledStep compile_step(F fn, StepOptions options) {
  return CompiledStep(
      [fn = std::move(fn)](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        if constexpr (std::is_invocable_v<F&, const std::vector<Tensor>&>) {
          return fn(in);
        } else if constexpr (std::is_invocable_v<F&, const Tensor&>) {
          VOLT_CHECK(in.size() == 1, "compile_step", "the step takes 1 tensor, got " << in.size());
          return {fn(in[0])};
        } else {
          static_assert(std::is_invocable_v<F&, const Tensor&, const Tensor&>,
                        "compile_step: the step takes (x), (x, y) or a vector of tensors");
          VOLT_CHECK(in.size() == 2, "compile_step", "the step takes 2 tensors, got " << in.size());
          return {fn(in[0], in[1])};
        }
      },
      std::move(options));
}

// The sections of a training step's trace, in order.
enum class StepSection { Forward, Loss, Backward, Optimizer };
const char* section_name(StepSection s);

}  // namespace volt::jit
