// Recording eager prims (the grad hook) and running backward over the tape.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <volt/autograd/hooks.h>
#include <volt/autograd/node.h>
#include <volt/autograd/vjp.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/ops.h>

namespace volt::autograd {

Edge edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.impl()->grad_fn) return {t.impl()->grad_fn, nullptr};
  return {nullptr, t.impl_ptr()};
}

void set_history(Tensor& out, std::shared_ptr<Node> node) {
  node->out_meta = {out.sizes(), out.dtype(), out.device()};
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

bool reads_saved_value(const OpCall& call, size_t i, const std::vector<Edge>& next) {
  return reads_saved_value(call, i, [&](size_t j) { return j < next.size() && next[j].valid(); });
}

bool reads_saved_value(const OpCall& call, size_t i, const std::function<bool(size_t)>& wanted) {
  switch (call.op) {
    // Only shapes and attributes: the value may change freely.
    case OpId::add:
    case OpId::sub:
    case OpId::neg:
    case OpId::sum:
    case OpId::pad:
    case OpId::copy:
    case OpId::convert_element_type:
      return false;
    case OpId::where: return i == 0;
    // d(a*b)/da reads b and the other way round.
    case OpId::mul:
    case OpId::matmul: return wanted(1 - i);
    case OpId::linear: return i < 2 && wanted(1 - i);
    case OpId::div: return i == 1 ? wanted(0) || wanted(1) : wanted(1);
    default: return true;  // every other rule reads its inputs, and views share them
  }
}

namespace {

// Which gradients of a bf16 product to make in f32: those flowing into an
// f32 -> bf16 cast (autocast's copy of an f32 weight), whose own rule then
// passes an f32 gradient on as it is.  Rounding the product's f32 sums to
// bf16 only to widen them again would lose bits and take two more passes.
std::vector<bool> wide_gradients(const OpCall& call, const std::vector<Edge>& next) {
  std::vector<bool> wide(next.size(), false);
  for (size_t i = 0; i < next.size(); ++i) {
    const auto* cast = dynamic_cast<const OpNode*>(next[i].node.get());
    wide[i] = cast && cast->call.op == OpId::convert_element_type && !cast->call.args.empty() &&
              cast->call.args[0].tensor.defined() && cast->call.args[0].tensor.dtype() == DType::f32 &&
              autograd::has_wide_gradient(call, i);
  }
  return wide;
}

}  // namespace

std::vector<Tensor> OpNode::apply(const Tensor& grad_out) {
  VOLT_CHECK(!released, "backward",
             "trying to backward through the graph a second time (through " << name()
                 << "); its saved tensors were freed. Pass retain_graph=true the first time");
  for (size_t i = 0; i < call.args.size() && i < saved_versions.size(); ++i) {
    const Value& v = call.args[i];
    if (!v.is_tensor || !v.tensor.has_data() || v.tensor.version() == saved_versions[i]) continue;
    VOLT_CHECK(!reads_saved_value(call, i, next), "backward",
               "one of the tensors " << name() << " needs was modified by an in-place operation: input "
                   << i << " of " << op_name(call.op) << ", " << v.tensor.meta_str() << ", is at version "
                   << v.tensor.version() << ", it was saved at version " << saved_versions[i]
                   << ". Write to a clone() instead, or before the tensor is used");
  }
  return vjp_wide(call, grad_out, wide_gradients(call, next));
}

std::string OpNode::name() const { return std::string(op_name(call.op)) + "_backward"; }

void OpNode::release() {
  released = true;
  call.args.clear();
  saved_versions.clear();
}

namespace {

// The hook tensor/ calls after an eager prim ran with inputs that need grad.
void record(const OpCall& call, std::vector<Tensor>& outputs) {
  if (!is_differentiable(call.op)) return;
  auto node = std::make_shared<OpNode>();
  node->call.op = call.op;
  node->call.attrs = call.attrs;
  for (const Value& v : call.args) {
    node->next.push_back(v.is_tensor ? edge_for(v.tensor) : Edge{});
    // Saved without history: the rule needs the values, the edges keep the graph.
    node->call.args.push_back(v.is_tensor ? Value(v.tensor.defined() ? v.tensor.detach() : Tensor()) : v);
    node->saved_versions.push_back(v.is_tensor && v.tensor.defined() ? v.tensor.version() : 0);
  }
  for (Tensor& out : outputs)
    if (is_floating(out.dtype())) set_history(out, node);
}

struct Registrar {
  Registrar() { set_grad_hook(&record); }
} g_registrar;

// `grad` is taken by value: a caller that moves its gradient in lets it be
// kept without a copy when nothing else can see it.
void accumulate(const std::shared_ptr<TensorImpl>& leaf, Tensor grad) {
  if (grad.sizes() != leaf->sizes) grad = sum_to(grad, leaf->sizes);
  if (grad.dtype() != leaf->dtype) grad = grad.to(leaf->dtype);
  if (!leaf->grad) {
    // The leaf must not alias a gradient that lives on in the graph, so it gets
    // a fresh tensor, unless this one is already private: no other handle to
    // it, no other view of its data, contiguous, and no history of its own
    // (PyTorch's AccumulateGrad steals such a gradient the same way).  Its
    // data is its storage, or on the lazy device its backend state (a lazy
    // view holds its base's state, so a base with views is never private).
    const TensorImpl& g = *grad.impl();
    bool data_private = g.storage ? g.storage.use_count() == 1
                                  : g.backend_state && g.backend_state.use_count() == 1;
    bool sole = grad.impl_ptr().use_count() == 1 && data_private && grad.is_contiguous() && !g.grad_fn &&
                !g.requires_grad;
    if (sole) {
      leaf->grad = grad.impl_ptr();
      return;
    }
    Tensor c = grad.contiguous();
    leaf->grad = (c.is_same(grad) ? grad.clone() : c).impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    acc.copy_(add(acc, grad));
  }
}

std::mutex g_hooks_mutex;
std::vector<std::pair<int64_t, BackwardHooks>> g_hooks;
int64_t g_next_hook = 0;

std::vector<BackwardHooks> current_hooks() {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  std::vector<BackwardHooks> out;
  for (auto& [h, hooks] : g_hooks) out.push_back(hooks);
  return out;
}

// Counts, per leaf, the edges still to deliver a gradient; calls grad_ready
// when a leaf's count reaches zero.
class LeafTracker {
 public:
  LeafTracker(std::vector<BackwardHooks> hooks, const std::vector<std::shared_ptr<Node>>& order)
      : hooks_(std::move(hooks)) {
    if (hooks_.empty()) return;
    for (const auto& node : order)
      for (const Edge& e : node->next)
        if (e.leaf) ++remaining_[e.leaf.get()];
  }
  bool active() const { return !hooks_.empty(); }
  // All edges of `node` have delivered (or will never deliver) their gradient.
  void done(const Node& node) {
    if (!active()) return;
    for (const Edge& e : node.next)
      if (e.leaf && --remaining_[e.leaf.get()] == 0) ready(e.leaf);
  }
  void ready(const std::shared_ptr<TensorImpl>& leaf) {
    for (const BackwardHooks& h : hooks_)
      if (h.grad_ready) h.grad_ready(leaf);
  }
  void finished() {
    for (const BackwardHooks& h : hooks_)
      if (h.finished) h.finished();
  }

 private:
  std::vector<BackwardHooks> hooks_;
  std::unordered_map<const TensorImpl*, int64_t> remaining_;
};

}  // namespace

int64_t add_backward_hooks(BackwardHooks hooks) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_hooks.emplace_back(g_next_hook, std::move(hooks));
  return g_next_hook++;
}

void remove_backward_hooks(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  std::erase_if(g_hooks, [&](const auto& h) { return h.first == handle; });
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  NoGradGuard no_grad;
  AutocastGuard no_autocast(std::nullopt);  // gradients follow the forward's types
  std::unordered_map<Node*, Tensor> pending;  // gradient summed so far per node
  std::vector<std::shared_ptr<Node>> order;   // reverse topological order
  {
    // Depth-first post-order, then reversed: every node before its inputs.
    std::unordered_set<Node*> seen;
    std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack;
    for (const Tensor& r : roots)
      if (r.impl()->grad_fn && seen.insert(r.impl()->grad_fn.get()).second)
        stack.push_back({r.impl()->grad_fn, 0});
    while (!stack.empty()) {
      auto& [node, i] = stack.back();
      if (i < node->next.size()) {
        const Edge& e = node->next[i++];
        if (e.node && seen.insert(e.node.get()).second) stack.push_back({e.node, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
    std::reverse(order.begin(), order.end());
  }
  LeafTracker tracker(current_hooks(), order);
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    Tensor g = grads[i];
    if (!g.defined()) {
      VOLT_CHECK(r.numel() == 1, "backward",
                 "grad can be implicitly created only for scalar outputs, got " << r.meta_str());
      g = Tensor::ones(r.sizes(), r.dtype(), r.device());
    }
    VOLT_CHECK(g.sizes() == r.sizes(), "backward",
               "gradient " << shape_str(g.sizes()) << " does not match output " << shape_str(r.sizes()));
    if (r.impl()->grad_fn) {
      Tensor& p = pending[r.impl()->grad_fn.get()];
      p = p.defined() ? add(p, g) : g;
    } else {
      accumulate(r.impl_ptr(), std::move(g));
      if (tracker.active()) tracker.ready(r.impl_ptr());
    }
  }
  for (const auto& node : order) {
    auto it = pending.find(node.get());
    if (it == pending.end()) {
      tracker.done(*node);
      continue;
    }
    Tensor g = it->second;
    pending.erase(it);
    std::vector<Tensor> in_grads = node->apply(g);
    // A rule that passes its gradient on as it is (a cast to the type it has)
    // leaves it private to the leaf it reaches, which then keeps it uncopied.
    g = Tensor();
    for (size_t i = 0; i < node->next.size() && i < in_grads.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.valid() || !in_grads[i].defined()) continue;
      if (e.leaf) {
        accumulate(e.leaf, std::move(in_grads[i]));
      } else {
        Tensor& p = pending[e.node.get()];
        p = p.defined() ? add(p, in_grads[i]) : in_grads[i];
      }
    }
    if (!retain_graph) node->release();
    tracker.done(*node);
  }
  if (tracker.active()) tracker.finished();
}

}  // namespace volt::autograd

namespace volt {

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  VOLT_CHECK(requires_grad(), "backward",
             "tensor " << meta_str() << " does not require grad and has no grad_fn");
  autograd::run_backward({*this}, {gradient}, retain_graph);
}

}  // namespace volt
