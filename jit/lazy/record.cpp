// Recording: an op on lazy tensors becomes a node of the pending graph, an op
// with no lowering falls back to eager, and the lazy device's side of
// Tensor::to and copy_ (jit/lazy/internal.h says how values are held).
#include <algorithm>
#include <functional>

#include <volt/jit/lazy/internal.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/custom_op.h>
#ifdef VOLT_WITH_CUDA
#include <volt/jit/cuda/step_graph.h>
#endif

namespace volt::lazy::detail {

// ------------------------------------------------------------ tensors and values

std::shared_ptr<LazyTensor> state_of(const Tensor& t) {
  auto st = std::static_pointer_cast<LazyTensor>(t.impl()->backend_state);
  VOLT_CHECK(st != nullptr && st->value, "lazy", "tensor " << t.meta_str() << " has no lazy value");
  return st;
}

void prune_live() {
  State& s = S();
  auto& v = s.live;
  v.erase(std::remove_if(v.begin(), v.end(), [](const std::weak_ptr<LazyTensor>& w) { return w.expired(); }),
          v.end());
  s.live_after_prune = v.size();
}

// A new lazy tensor holding `value`.
Tensor wrap(ValuePtr value, std::shared_ptr<LazyTensor> st = nullptr) {
  Tensor t = Tensor::proxy(value->meta.sizes, value->meta.dtype, kLazy);
  if (!st) st = std::make_shared<LazyTensor>();
  st->value = std::move(value);
  State& s = S();
  s.live.push_back(st);
  if (s.live.size() > 2 * s.live_after_prune + 4096) prune_live();
  t.impl()->backend_state = std::move(st);
  return t;
}


ValuePtr data_value(Tensor data) {
  auto v = std::make_shared<LazyValue>();
  v->meta = {data.sizes(), data.dtype(), kLazy};
  v->hash = leaf_hash(v->meta);
  v->data = std::move(data);
  return v;
}

// A copy on the backend device that no one else can write to.
Tensor own_copy(const Tensor& t) {
  Device dev = S().backend;
  return t.device() == dev ? t.clone() : t.to(dev);
}

// The value an op argument stands for: a lazy tensor's, or a zero-dim CPU
// tensor taken in as data (PyTorch lets those join any device).
ValuePtr value_of(const Tensor& t) {
  if (t.device().is_lazy()) return current(*state_of(t));
  VOLT_CHECK(t.dim() == 0 && t.has_data(), "lazy",
             "expected lazy tensors or zero-dim CPU tensors, got " << t.meta_str());
  return data_value(own_copy(t));
}


// ------------------------------------------------------------ recording

// Runs an op with no lowering eagerly on the backend device: its lazy inputs
// are computed first, its outputs become new leaves.  Counted as a fallback
// (Fallback.<op>) when that cuts a graph, that is when an input was still a
// pending node; an op whose inputs all hold their values already (nll_loss's
// target check on a batch just moved to the device) cuts nothing and counts
// as DataOp.<op>.  On a CUDA backend an index check (that target check,
// embedding's) runs as its device form: a kernel noting a bad index in the
// error word, reported at the next synchronisation (wait_device_ops), so the
// step does not wait for the device to hand the indices to the host.
std::vector<Tensor> fallback(const OpCall& call) {
  std::vector<ValuePtr> pending;
  for (const Value& v : call.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.device().is_lazy()) pending.push_back(current(*state_of(v.tensor)));
  const bool cuts = std::any_of(pending.begin(), pending.end(), [](const ValuePtr& v) { return v->node != nullptr; });
  count(std::string(cuts ? "Fallback." : "DataOp.") + op_name(call));
  run_graph(pending, Reason::Fallback);
  OpCall c = call;
  for (Value& v : c.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.device().is_lazy())
      v.tensor = data_of(current(*state_of(v.tensor)), Reason::Fallback);
  if (c.attrs.device.is_lazy()) c.attrs.device = S().backend;
#ifdef VOLT_WITH_CUDA
  if (S().backend.is_cuda() && jit::cuda::has_device_check(c)) c = jit::cuda::device_check_call(c);
#endif
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;  // the caller's grad hook records the op on the lazy outputs
    outs = run_prim(c);
  }
  for (Tensor& o : outs) o = wrap(data_value(o));
  return outs;
}

// Whether a scalar operand can be passed at run time: elementwise ops, where
// a zero-dim tensor of the op's compute dtype gives the same result dtype.
bool lift_scalars(OpId op) {
  OpKind k = op_info(op).kind;
  return k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Ternary;
}

// Heavy operands first (see Node::visit_order).
void order_operands(Node& n) {
  auto heavy = [](const Operand& o) { return o.kind == Operand::Value && o.value->node && o.value->node->heavy; };
  n.heavy = !is_elementwise(n.op);
  for (size_t i = 0; i < n.operands.size(); ++i)
    if (heavy(n.operands[i])) {
      n.heavy = true;
      n.visit_order.push_back(static_cast<uint8_t>(i));
    }
  for (size_t i = 0; i < n.operands.size(); ++i)
    if (!heavy(n.operands[i])) n.visit_order.push_back(static_cast<uint8_t>(i));
}

// The structural hash of a node: what the graph key spells out, folded into 64
// bits (random counters and runtime scalar values left out).
uint64_t node_hash(const Node& n) {
  uint64_t h = mix(static_cast<uint64_t>(n.op), n.outputs.size());
  for (const Operand& o : n.operands) {
    if (o.kind == Operand::Value) h = mix(h, o.value->hash);
    else if (o.kind == Operand::Undefined) h = mix(h, 7);
    else if (o.runtime) h = mix(h, 11 + static_cast<uint64_t>(o.runtime_dtype));
    else h = mix(mix(h, static_cast<uint64_t>(o.scalar.kind)), std::hash<double>{}(o.scalar.value));
  }
  const Attrs& a = n.attrs;
  for (int64_t i : a.ints) h = mix(h, static_cast<uint64_t>(i));
  h = mix(mix(mix(h, std::hash<double>{}(a.a)), std::hash<double>{}(a.b)),
          static_cast<uint64_t>(a.dtype) * 2 + a.flag);
  for (const TensorMeta& m : n.outputs) h = hash_meta(h, m);
  return h;
}

// Gives a node (operands and outputs filled in) its layout and hash, and its output values.
std::vector<ValuePtr> add_node(const std::shared_ptr<Node>& node) {
  State& s = S();
  order_operands(*node);
  const uint64_t h = node_hash(*node);
  ++s.pending_nodes;
  ++s.nodes_recorded;
  std::vector<ValuePtr> values;
  for (size_t i = 0; i < node->outputs.size(); ++i) {
    auto v = std::make_shared<LazyValue>();
    v->meta = node->outputs[i];
    v->node = node;
    v->output = static_cast<int>(i);
    v->hash = mix(h, i);
    values.push_back(std::move(v));
  }
  return values;
}

// The lazy device's handler (tensor/dispatch.h): a prim on lazy tensors becomes a node.
std::vector<Tensor> record(const OpCall& call) {
  State& s = S();
  if (call.op == OpId::custom || (!s.forced_fallback.empty() && s.forced_fallback.count(op_name(call.op))))
    return fallback(call);
  if (s.pending_nodes >= s.size_limit) run_live(Reason::SizeLimit);
  std::vector<TensorMeta> metas = infer_meta(call);
  for (TensorMeta& m : metas) m.device = kLazy;  // a zero-dim CPU operand may come first

  if (call.op == OpId::full || call.op == OpId::arange) {
    // A constant is data, like a scalar operand: the step that first fills the
    // optimizer's state then has the same graph as the steps after it.
    Attrs at = call.attrs;
    at.device = s.backend;
    std::vector<Tensor> outs = run_prim(OpCall{call.op, {}, at});
    return {wrap(data_value(outs.at(0)))};
  }

  auto node = std::make_shared<Node>();
  node->op = call.op;
  node->attrs = call.attrs;
  node->outputs = metas;
  node->operands.reserve(call.args.size());
  const bool lift = lift_scalars(call.op);
  DType cd = lift ? compute_dtype(call) : DType::f32;
  for (size_t i = 0; i < call.args.size(); ++i) {
    const Value& v = call.args[i];
    Operand o;
    if (!v.is_tensor) {
      o.kind = Operand::Scalar;
      o.scalar = v.scalar;
      // A comparison with zero, or a select of zero, keeps its zero in the
      // graph (a ReLU's mask and select: jit/rewrites/conv_relu.h reads them).
      // A bf16/f16 op keeps its scalars too: as a run-time input of its
      // type the scalar would be rounded to 16 bits, which eager mode (and a
      // literal, computed on in float) does not do.
      o.runtime = lift && !is_half(cd) &&
                  !(v.scalar.value == 0.0 && (call.op == OpId::gt || call.op == OpId::le || call.op == OpId::where));
      o.runtime_dtype = op_info(call.op).kind == OpKind::Ternary && i == 0 ? DType::b8 : cd;
    } else if (v.tensor.defined()) {
      o.kind = Operand::Value;
      o.value = value_of(v.tensor);
    }
    node->operands.push_back(std::move(o));
  }
  std::vector<ValuePtr> values = add_node(node);
  std::vector<Tensor> outs;
  const Value& a0 = call.args.empty() ? Value(0.0) : call.args[0];
  const bool view = op_info(call.op).kind == OpKind::View && a0.is_tensor && a0.tensor.device().is_lazy();
  for (ValuePtr& v : values) {
    std::shared_ptr<LazyTensor> st;
    if (view) {
      st = std::make_shared<LazyTensor>();
      st->base = state_of(a0.tensor);
      st->base_value = node->operands[0].value;
      st->view_op = call.op;
      st->view_attrs = call.attrs;
    }
    outs.push_back(wrap(std::move(v), std::move(st)));
  }
  return outs;
}

// A view's value now: the view op replayed if its base was written since.
ValuePtr current(LazyTensor& st) {
  if (!st.base) return st.value;
  ValuePtr b = current(*st.base);
  if (b != st.base_value) {
    auto n = std::make_shared<Node>();
    n->op = st.view_op;
    n->attrs = st.view_attrs;
    n->outputs = {st.value->meta};
    Operand o;
    o.kind = Operand::Value;
    o.value = b;
    n->operands.push_back(std::move(o));
    st.value = add_node(n).at(0);
    st.base_value = std::move(b);
  }
  return st.value;
}

double item(const Tensor& t) {
  return data_of(current(*state_of(t)), Reason::ValueNeeded).item_double();
}

// The lazy device's side of Tensor::to and copy_.
class LazyBackend final : public Backend {
 public:
  void* allocate(size_t, int) override {
    VOLT_FAIL("lazy", "lazy tensors hold no memory of their own");
  }
  void deallocate(void*, int) override {}
  void run(const OpCall& call, std::vector<Tensor>&) override {
    VOLT_FAIL(op_name(call.op), "the lazy device records ops; it does not run them");
  }
  void synchronize() override { wait_device_ops(); }

  void copy(const Tensor& dst, const Tensor& src) override {
    if (!dst.device().is_lazy()) {
      // To another device: the value is needed now.
      const Tensor& d = data_of(current(*state_of(src)), Reason::ValueNeeded);
      count("Transfer.to_host");
      if (dst.device() == d.device()) {
        Backend* be = backend_for(dst.device().type);
        be->copy(dst, d);
      } else {
        Tensor h = d.to(dst.device());
        backend_for(dst.device().type)->copy(dst, h);
      }
      return;
    }
    VOLT_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "copy_",
               "lazy copy from " << src.meta_str() << " into " << dst.meta_str());
    auto* st = static_cast<LazyTensor*>(dst.impl()->backend_state.get());
    VOLT_CHECK(!(st && st->base), "copy_",
               "writing in place into a view of a lazy tensor is not supported (its base would not "
               "see the write); write into the base tensor instead");
    ValuePtr v;
    if (src.device().is_lazy()) {
      v = current(*state_of(src));
    } else {
      count("Transfer.to_lazy");
      v = data_value(own_copy(src));
    }
    if (st) {
      if (st->value && !st->value->node) st->prior = st->value;  // the old value a replay may write over
      st->value = std::move(v);
    } else {
      // A fresh handle from to(kLazy): it gets its state here.
      Tensor w = wrap(std::move(v));
      dst.impl()->backend_state = w.impl()->backend_state;
    }
  }
};

struct Registrar {
  LazyBackend backend;
  Registrar() {
    register_backend(DeviceType::Lazy, &backend);
    set_lazy_handler(&record);
    set_item_resolver(DeviceType::Lazy, &item);
  }
} g_registrar;


}  // namespace volt::lazy::detail
