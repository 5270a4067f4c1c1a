#include <volt/jit/executor.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/executor_registry.h>
#include <volt/jit/flash_attention.h>
#include <volt/jit/passes.h>
#include <volt/jit/tracer.h>

namespace volt::jit {

// ---------------------------------------------------------------- symbols

std::vector<Tensor> Symbol::call(std::vector<Value> args) const {
  VOLT_CHECK(id_ >= 0, "Symbol", "calling a symbol that was never registered");
  return dispatch(custom_call(id_, std::move(args)));
}

const std::string& Symbol::name() const { return custom_op(id_).name; }

std::string OpRef::name() const { return op == OpId::custom ? custom_op(custom).name : op_name(op); }

// ---------------------------------------------------------------- operator executors

Symbol OperatorExecutor::register_operator(const std::string& name, OperatorDef def) {
  VOLT_CHECK(static_cast<bool>(def.like) != static_cast<bool>(def.meta), this->name(),
             "register_operator(\"" << name << "\") needs exactly one of `like` and `meta`");
  VOLT_CHECK(def.fn, this->name(), "register_operator(\"" << name << "\") needs `fn`, the implementation");
  for (int64_t id : operators_)
    VOLT_CHECK(custom_op(id).name != name, this->name(),
               "an operator named \"" << name << "\" is already registered here; traces name operators, so "
                                       "each name is one operator (register the implementation once and reuse "
                                       "the symbol it returned)");
  CustomOpDef c;
  c.name = name;
  c.decomposition = def.like;
  c.meta = def.meta;
  c.kernel = def.fn;
  c.vjp = def.grad;
  c.arg_names = std::move(def.arg_names);
  c.scalar_repr = std::move(def.scalar_repr);
  int64_t id = register_custom_op(std::move(c));
  operators_.push_back(id);
  note_operator_owner(id, *this);
  return Symbol(id);
}

void OperatorExecutor::register_implementation(OpRef op, Implementation impl) {
  VOLT_CHECK(impl.execution_transform || impl.grad_transform, name(),
             "register_implementation(" << op.name() << ") needs an execution transform or a grad transform");
  for (auto& [ref, existing] : impls_)
    if (ref.op == op.op && ref.custom == op.custom) {
      existing = std::move(impl);
      return;
    }
  impls_.emplace_back(op, std::move(impl));
}

const OperatorExecutor::Implementation* OperatorExecutor::implementation_for(const OpCall& c) const {
  for (const auto& [ref, impl] : impls_)
    if (ref.matches(c)) return &impl;
  return nullptr;
}

bool OperatorExecutor::owns(const OpCall& c) const {
  return c.op == OpId::custom && std::find(operators_.begin(), operators_.end(), c.attrs.custom) != operators_.end();
}

std::vector<Tensor> OperatorExecutor::run(const OpCall& c) const {
  const CustomOpDef& def = custom_op(c.attrs.custom);
  std::vector<Tensor> outs = def.kernel(c.args);
  return outs;
}

// ---------------------------------------------------------------- behaviour

namespace {

// The call of `b` on real tensors, its random draws placed in the program's counters.
OpCall bound_call(const OpCall& call, const std::vector<Tensor>& args, const PhiloxState& rng) {
  OpCall c = call;
  size_t k = 0;
  for (Value& v : c.args)
    if (v.is_tensor && v.tensor.defined()) v.tensor = args.at(k++);
  if (op_info(c.op).kind == OpKind::Random) {
    c.attrs.seed = rng.seed;
    c.attrs.offset += rng.offset;
  }
  return c;
}

bool checker_accepts(const OperatorExecutor& ex, const OperatorExecutor::Implementation& impl,
                     const OpCall& c) {
  if (!impl.checker) return true;
  try {
    return impl.checker(executor_arguments(c));
  } catch (const std::exception& e) {
    VOLT_FAIL(ex.name(), "the checker for " << op_name(c) << " threw: " << e.what());
  }
}

}  // namespace

bool Executor::takes(const BoundSymbol&) const { return false; }

Claim Executor::claim(const BoundSymbol& b, ProxyNames&) const {
  BoundSymbol c = b;
  c.executor = this;
  return {{std::move(c)}, false};
}

std::vector<Tensor> Executor::execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                                      const PhiloxState& rng) const {
  if (!b.is_fusion() && is_prim(b.call)) return run_eager(bound_call(b.call, args, rng));
  // A region or a composite: its prims one by one.
  std::unordered_map<int64_t, Tensor> values;
  std::vector<Tensor> ins = tensor_args(b);
  for (size_t i = 0; i < ins.size(); ++i) values[id_of(ins[i])] = args.at(i);
  for (const BoundSymbol& p : flatten_to_prims(!b.is_fusion() ? std::vector<BoundSymbol>{b} : b.subsymbols)) {
    std::vector<Tensor> a;
    for (const Tensor& t : tensor_args(p)) a.push_back(values.at(id_of(t)));
    std::vector<Tensor> outs = run_eager(bound_call(p.call, a, rng));
    for (size_t i = 0; i < outs.size() && i < p.outputs.size(); ++i) values[id_of(p.outputs[i])] = outs[i];
  }
  std::vector<Tensor> r;
  for (const Tensor& o : b.outputs) r.push_back(values.at(id_of(o)));
  return r;
}

const Executor::GradTransform* Executor::grad_transform_for(const OpCall&) const { return nullptr; }

bool OperatorExecutor::takes(const BoundSymbol& b) const {
  if (owns(b.call)) return true;
  const Implementation* impl = implementation_for(b.call);
  return impl && impl->execution_transform && checker_accepts(*this, *impl, b.call);
}

Claim OperatorExecutor::claim(const BoundSymbol& b, ProxyNames& names) const {
  if (owns(b.call)) {
    BoundSymbol c = b;
    c.executor = this;
    c.top_level_prim = false;
    return {{std::move(c)}, false};
  }
  const Implementation* impl = implementation_for(b.call);
  std::vector<Tensor> results;
  std::vector<BoundSymbol> made = record(
      names, [&] { results = impl->execution_transform(executor_arguments(b.call)); }, /*flatten=*/false);
  VOLT_CHECK(results.size() >= b.outputs.size(), name(),
             "the execution transform for " << op_name(b.call) << " returned " << results.size()
                                            << " tensors, the op has " << b.outputs.size());
  std::unordered_map<int64_t, Tensor> rename;
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    const Tensor& r = results[i];
    const Tensor& o = b.outputs[i];
    VOLT_CHECK(r.defined() && r.sizes() == o.sizes() && r.dtype() == o.dtype() && r.device() == o.device(), name(),
               "the execution transform for " << op_name(b.call) << " gave output " << i << " as "
                                              << (r.defined() ? r.meta_str() : std::string("undefined"))
                                              << ", expected " << o.meta_str());
    rename[id_of(r)] = o;
  }
  substitute(made, rename);
  return {std::move(made), true};
}

std::vector<Tensor> OperatorExecutor::execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                                              const PhiloxState& rng) const {
  OpCall c = bound_call(b.call, args, rng);
  std::vector<Tensor> outs = run(c);
  VOLT_CHECK(outs.size() == b.outputs.size(), name(),
             op_name(c) << " returned " << outs.size() << " tensors, its trace expects " << b.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& want = b.outputs[i];
    VOLT_CHECK(outs[i].defined() && outs[i].sizes() == want.sizes() && outs[i].dtype() == want.dtype(), name(),
               op_name(c) << " output " << i << " is "
                          << (outs[i].defined() ? outs[i].meta_str() : std::string("undefined"))
                          << " but its like-function says " << want.meta_str());
  }
  return outs;
}

const OperatorExecutor::GradTransform* OperatorExecutor::grad_transform_for(const OpCall& c) const {
  const Implementation* impl = implementation_for(c);
  return impl && impl->grad_transform && checker_accepts(*this, *impl, c) ? &impl->grad_transform : nullptr;
}

bool FusionExecutor::takes(const BoundSymbol& b) const {
  // An expand stays a view; the fusion pass puts it into a row region that reads it.
  if (b.call.op == OpId::expand) return false;
  if (b.subsymbols.empty() || b.top_level_prim) return is_prim(b.call) && can_fuse(b);
  for (const BoundSymbol& p : flatten_to_prims({b}))
    if (!can_fuse(p)) return false;
  return true;
}

Claim FusionExecutor::claim(const BoundSymbol& b, ProxyNames&) const {
  Claim r;
  for (BoundSymbol p : flatten_to_prims({b})) {
    p.executor = this;
    r.bsyms.push_back(std::move(p));
  }
  return r;
}

std::vector<Tensor> FusionExecutor::execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                                            const PhiloxState& rng) const {
  if (b.is_fusion() && compiled(b)) return run_fusion(b, args, rng);
  return Executor::execute(b, args, rng);
}

// ---------------------------------------------------------------- registry

namespace {

// Never destroyed: executors with static storage leave the registry at exit,
// in whatever order the statics go.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<Executor*>& registry() {
  static auto* r = new std::vector<Executor*>;
  return *r;
}

// Takes what is left; runs it prim by prim (the base class's behaviour).
class EagerExecutor final : public Executor {
 public:
  EagerExecutor() : Executor("eager", VOLT_VERSION) {}
};

// Never destroyed either: a static executor's destructor takes itself out.
std::vector<Executor*>& builtins() {
  static auto* b = new std::vector<Executor*>{&flash_executor(), &cpu_fusion_executor(), &eager_executor()};
  return *b;
}

}  // namespace

Executor::~Executor() {
  unregister_executor(*this);
  remove_builtin_executor(*this);
  forget_operators_of(*this);
}

void unregister_executor(Executor& ex) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<Executor*>& r = registry();
  r.erase(std::remove(r.begin(), r.end(), &ex), r.end());
}

void register_executor(Executor& ex) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (Executor* e : registry())
    VOLT_CHECK(e == &ex || e->name() != ex.name(), "register_executor",
               "an executor named \"" << ex.name() << "\" is already registered");
  if (std::find(registry().begin(), registry().end(), &ex) == registry().end()) registry().push_back(&ex);
}

std::vector<Executor*> registered_executors() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<Executor*> r = builtin_executors();
  for (Executor* e : registry())
    if (std::find(r.begin(), r.end(), e) == r.end()) r.push_back(e);
  return r;
}

Executor& eager_executor() {
  static EagerExecutor e;
  return e;
}

void add_builtin_executor(Executor& ex, bool before_others) {
  std::vector<Executor*>& b = builtins();
  if (std::find(b.begin(), b.end(), &ex) != b.end()) return;
  b.insert(before_others ? b.begin() : b.end() - 1, &ex);  // eager stays last
}

void remove_builtin_executor(Executor& ex) {
  std::vector<Executor*>& b = builtins();
  b.erase(std::remove(b.begin(), b.end(), &ex), b.end());
}

std::vector<Executor*> builtin_executors() { return builtins(); }

std::vector<Executor*> executor_order(const std::vector<Executor*>& user) {
  std::vector<Executor*> r;
  for (Executor* e : user)
    if (std::find(r.begin(), r.end(), e) == r.end()) r.push_back(e);
  for (Executor* e : builtin_executors())
    if (std::find(r.begin(), r.end(), e) == r.end()) r.push_back(e);
  return r;
}

// ---------------------------------------------------------------- the claim pass

namespace {

bool takes_some(const Executor* ex, const BoundSymbol& b) {
  if (ex->takes(b)) return true;
  for (const BoundSymbol& s : b.subsymbols)
    if (takes_some(ex, s)) return true;
  return false;
}

// Offers `b` to `ex`; appends what results (claimed or not) to `out`.
void visit(const Executor* ex, const BoundSymbol& b, ProxyNames& names, std::vector<BoundSymbol>& out, int depth) {
  if (b.executor || !takes_some(ex, b)) {
    out.push_back(b);
    return;
  }
  if (!ex->takes(b)) {  // open it up: its parts may be taken
    for (const BoundSymbol& s : b.subsymbols) visit(ex, s, names, out, depth);
    return;
  }
  VOLT_CHECK(depth < 8, ex->name(),
             "the execution transform for " << op_name(b.call) << " keeps producing ops it claims again");
  Claim c = ex->claim(b, names);
  for (BoundSymbol& m : c.bsyms)
    if (c.offer_again) visit(ex, m, names, out, depth + 1);  // this executor first
    else out.push_back(std::move(m));
}

}  // namespace

Trace claim_pass(const Trace& t, ProxyNames& names, const std::vector<Executor*>& executors) {
  auto t0 = Clock::now();
  check_operator_executors(t.bsyms, executors);
  Trace r = t;
  for (const Executor* ex : executors) {
    if (ex == &eager_executor()) break;
    std::vector<BoundSymbol> next;
    for (const BoundSymbol& b : r.bsyms) visit(ex, b, names, next, 0);
    r.bsyms = std::move(next);
  }
  for (BoundSymbol& b : r.bsyms)
    if (!b.executor) b.executor = &eager_executor();
  r.provenance = "Transform for execution";
  r.millis = ms_since(t0);
  return r;
}

const OperatorExecutor::GradTransform* grad_transform_for(const OpCall& c,
                                                           const std::vector<Executor*>& executors) {
  for (const Executor* ex : executors)
    if (const auto* g = ex->grad_transform_for(c)) return g;
  return nullptr;
}

}  // namespace volt::jit
