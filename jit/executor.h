// Executors: who runs each bound symbol of an execution trace.
//
// After the semantic passes (tracing, DCE/CSE, grad) the claim pass hands every
// bound symbol to an executor, trying them in priority order:
//
//   user executors (OperatorExecutor)  -> claim ops their checker accepts,
//                                         rewriting them by an execution transform
//   flash (jit/flash_attention.h)      -> the same, for scaled_dot_product_attention
//   fusion executors (cpu-fusion, ...) -> claim elementwise prims, later grouped
//                                         into generated kernels by the fusion pass
//   eager                              -> claims everything left, one kernel per prim
//
// An op no executor claims whole is opened up: its subsymbols (its
// decomposition) are offered to the executors instead.  So `linear` stays one
// call run by eager, while `relu` dissolves into gt + where for a fusion.
//
//   volt::jit::OperatorExecutor myex("myex", "0.1");
//   auto multimul = myex.register_operator("multimul", {.like = multimul_like, .fn = multimul_impl});
//   auto jf = volt::jit::jit(foo, {.executors = {myex}});
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/random.h>

namespace volt::jit {

class FusionExecutor;

// What the claim pass does with a bound symbol an executor takes.
struct Claim {
  std::vector<BoundSymbol> bsyms;  // what runs in its place
  bool offer_again = false;        // true: ops of an execution transform, offered to the executors again
};

// An executor says what it takes (takes, claim) and how it runs what it took
// (execute); the base class is the eager executor's behaviour: it takes
// nothing in the claim pass (eager gets what is left) and runs a bound
// symbol prim by prim on the eager kernels.
class Executor {
 public:
  Executor(std::string name, std::string version) : name_(std::move(name)), version_(std::move(version)) {}
  // An executor leaves the registry (register_executor) when it is destroyed.
  virtual ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }

  // Whether it takes `b` as it is (else the claim pass offers b's subsymbols).
  virtual bool takes(const BoundSymbol& b) const;
  // What runs in place of a bound symbol it takes (each marked with its executor).
  virtual Claim claim(const BoundSymbol& b, ProxyNames& names) const;
  // Runs a bound symbol it took on real tensors: `args` are its tensor
  // arguments in order (a fusion's inputs), `rng` the program's Philox state.
  virtual std::vector<Tensor> execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                                      const PhiloxState& rng) const;
  // The grad transform it supplies for this call, if any (see OperatorExecutor):
  // it restates the op and exchanges gradients through get_grad and put_grads.
  using GradTransform = std::function<std::vector<Tensor>(const std::vector<Value>&)>;
  virtual const GradTransform* grad_transform_for(const OpCall& c) const;
  // Its fusion side, if it groups what it takes into fusion regions.
  virtual const FusionExecutor* fusion() const { return nullptr; }

 private:
  std::string name_, version_;
};

// An op made by register_operator: call it like any volt op (eagerly, or on
// proxies while tracing, where it is recorded under its own name).
class Symbol {
 public:
  Symbol() = default;
  explicit Symbol(int64_t custom_id) : id_(custom_id) {}
  template <class... A>
  std::vector<Tensor> operator()(A&&... args) const {
    return call({Value(std::forward<A>(args))...});
  }
  std::vector<Tensor> call(std::vector<Value> args) const;
  int64_t id() const { return id_; }
  const std::string& name() const;

 private:
  int64_t id_ = -1;
};

// The op an implementation is for: a built-in op (OpId::mul) or a Symbol.
struct OpRef {
  OpId op;
  int64_t custom = -1;
  OpRef(OpId o) : op(o) {}  // NOLINT: implicit on purpose
  OpRef(const Symbol& s) : op(OpId::custom), custom(s.id()) {}  // NOLINT
  bool matches(const OpCall& c) const { return c.op == op && (op != OpId::custom || c.attrs.custom == custom); }
  std::string name() const;
};

class OperatorExecutor : public Executor {
 public:
  using Fn = CustomOpDef::Fn;             // arguments -> outputs
  using MetaFn = CustomOpDef::MetaFn;     // arguments -> output metadata
  using Checker = std::function<bool(const std::vector<Value>&)>;

  // Exactly one of `like` and `meta`.  `like` writes the op with volt ops: it
  // gives the op its metadata, its printed decomposition and its gradient.
  // `meta` declares a new prim: metadata only, no gradient unless `grad` is set.
  // `fn` computes the op on real tensors whenever this executor runs it.
  struct OperatorDef {
    Fn like{};
    MetaFn meta{};
    Fn fn{};
    CustomOpDef::VjpFn grad{};  // a prim's VJP: (inputs, output grads) -> input grads
    // How traces print its calls (tensor/custom_op.h): keyword names, scalars.
    std::vector<std::string> arg_names{};
    std::function<std::string(size_t, const Scalar&)> scalar_repr{};
  };
  struct Implementation {
    Checker checker{};               // may this executor take the op here? (null: always)
    Fn execution_transform{};        // what to run instead, written with volt ops and symbols
    GradTransform grad_transform{};  // replaces the op's VJP in the grad pass (optional)
  };

  using Executor::Executor;

  Symbol register_operator(const std::string& name, OperatorDef def);
  // Registering an op again replaces its implementation.
  void register_implementation(OpRef op, Implementation impl);

  // The implementation for this call, if any (the checker is not consulted).
  const Implementation* implementation_for(const OpCall& c) const;
  // Whether this executor registered the op of the call.
  bool owns(const OpCall& c) const;
  // Runs an op it owns on real tensors.
  std::vector<Tensor> run(const OpCall& c) const;

  // Ops it owns, and ops whose implementation's checker accepts the call.
  bool takes(const BoundSymbol& b) const override;
  // An op it owns stays as it is; another is replaced by its execution transform.
  Claim claim(const BoundSymbol& b, ProxyNames& names) const override;
  // Runs an op it owns by its `fn`, checking the outputs against the trace.
  std::vector<Tensor> execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                              const PhiloxState& rng) const override;
  const GradTransform* grad_transform_for(const OpCall& c) const override;

 private:
  std::vector<int64_t> operators_;
  std::vector<std::pair<OpRef, Implementation>> impls_;
};

// How many distinct kernels a fusion executor made ready (compiled, or loaded
// from the disk cache), and how many fusion regions reused one it had (equal
// keys, jit/codegen.h).
struct KernelStats {
  int64_t kernels = 0;
  int64_t shared = 0;
};

// Takes elementwise prims, which the fusion pass groups into fusion regions
// with generated kernels (jit/codegen.h); builds and runs those kernels.
class FusionExecutor : public Executor {
 public:
  using Executor::Executor;
  virtual bool can_fuse(const BoundSymbol& prim) const = 0;
  virtual std::string prefix() const = 0;  // fusion names: prefix0, prefix1, ...
  // Builds the kernels of this executor's fusions in the trace; false if it could
  // not (they then run prim by prim).
  virtual bool compile(Trace& t) const = 0;
  // Whether the region's kernel is built (else it runs prim by prim).
  virtual bool compiled(const BoundSymbol& fusion) const = 0;
  // Runs a built region's kernel.
  virtual std::vector<Tensor> run_fusion(const BoundSymbol& fusion, const std::vector<Tensor>& inputs,
                                         const PhiloxState& rng) const = 0;
  virtual KernelStats kernel_stats() const = 0;
  const FusionExecutor* fusion() const override { return this; }

  // Prims it can fuse, and ops that are wholly made of them.
  bool takes(const BoundSymbol& b) const override;
  // The prims, each marked for this executor (the fusion pass groups them).
  Claim claim(const BoundSymbol& b, ProxyNames& names) const override;
  // A region: its kernel when built, else its prims one by one.
  std::vector<Tensor> execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                              const PhiloxState& rng) const override;
};

// Makes an executor known by name (registered_executors lists it) until it is
// destroyed or unregistered; the registry never outlives what it lists.
void register_executor(Executor& ex);
void unregister_executor(Executor& ex);
std::vector<Executor*> registered_executors();

// The built-in executors.  Device backends add theirs (nvrtc, cublas) with
// add_builtin_executor; the order of the list is the priority.
Executor& eager_executor();
FusionExecutor& cpu_fusion_executor();
void add_builtin_executor(Executor& ex, bool before_others = true);
void remove_builtin_executor(Executor& ex);  // no-op when it is not one
std::vector<Executor*> builtin_executors();

// The user's executors first, then the built-in ones, eager last.
std::vector<Executor*> executor_order(const std::vector<Executor*>& user);

// Hands every bound symbol to an executor (see the top of this file).
Trace claim_pass(const Trace& t, ProxyNames& names, const std::vector<Executor*>& executors);

// The grad transform an executor in the list supplies for this call, if its checker accepts it.
const OperatorExecutor::GradTransform* grad_transform_for(const OpCall& c,
                                                           const std::vector<Executor*>& executors);

}  // namespace volt::jit
