// The eager tape.  Each recorded op becomes a Node holding what its VJP rule
// needs; backward() walks the nodes in reverse topological order.
//
//   auto w = volt::Tensor::randn({3}).requires_grad_();
//   auto loss = (w * w).sum();
//   loss.backward();          // w.grad() == 2 * w
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt::autograd {

struct Node;

// Where the gradient of one input goes: another node, or a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool valid() const { return node || leaf; }
};

struct Node {
  virtual ~Node() = default;
  // Gradients for each input, given the gradient of the output.
  virtual std::vector<Tensor> apply(const Tensor& grad_out) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors; a second backward through a released node is an error.
  virtual void release() { released = true; }

  std::vector<Edge> next;  // one per input
  TensorMeta out_meta;     // shape/dtype/device of the output
  bool released = false;
};

// A node for one eager prim: the call (with its tensors saved) and its VJP rule.
struct OpNode final : Node {
  OpCall call;
  // Each saved tensor's version when it was saved (tensor/storage.h): apply()
  // refuses to run the rule on a value written in place since.
  std::vector<uint64_t> saved_versions;
  std::vector<Tensor> apply(const Tensor& grad_out) override;
  std::string name() const override;
  void release() override;
};

// Whether the VJP rule of `call` reads the value of argument i (not only its
// shape), given which arguments need a gradient (`next`).  A view's input
// counts as read: a write to it after the view was taken makes the view's
// history stale.
bool reads_saved_value(const OpCall& call, size_t i, const std::vector<Edge>& next);
// The same, with `wanted(j)` saying whether argument j needs a gradient (the
// jit's grad pass asks this of scalar arguments: those read are saved).
bool reads_saved_value(const OpCall& call, size_t i, const std::function<bool(size_t)>& wanted);

// The edge for a tensor that is an input of a new node.
Edge edge_for(const Tensor& t);
// Makes `out` the output of `node` (sets grad_fn and requires_grad).
void set_history(Tensor& out, std::shared_ptr<Node> node);

// Runs backward from `roots` with the given gradients (undefined = ones for scalars).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

}  // namespace volt::autograd
