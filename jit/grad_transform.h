// Grad transforms: an executor's own rule for differentiating an op, written
// as Thunder writes them.  The transform restates the op's forward, asks for
// the gradient of its result with get_grad, computes the inputs' gradients and
// hands them back with put_grads, then returns the forward's result:
//
//   // mul, with both gradients made by one multimul
//   auto mymul_grad = [&](const std::vector<Value>& v) {
//     Tensor a = v[0].tensor, b = v[1].tensor;
//     Tensor fwd = mul(a, b);
//     Tensor g = jit::get_grad(fwd);
//     auto ab = multimul(b, g, a, g);
//     jit::put_grads({a, b}, {ab[0], ab[1]});
//     return std::vector<Tensor>{fwd};
//   };
//   myex.register_implementation(OpId::mul, {.checker = all_cpu, .grad_transform = mymul_grad});
//
// The grad pass traces the transform once per use.  Its ops that read no
// gradient are the forward: they take the op's place in the forward trace (so
// a forward op may compute more than the op did, e.g. a statistic backward
// needs, and that value is saved for backward).  Its ops that read a gradient
// are the backward: they go to the backward trace, where get_grad's value is
// the cotangent of that output.
#pragma once
#include <functional>
#include <unordered_map>
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

// Inside a grad transform: the gradient of `forward_value`, one of the values
// the transform returns.  Outside one: an error.
Tensor get_grad(const Tensor& forward_value);
// Inside a grad transform: the gradients of the op's inputs (tensor arguments
// of the transform), one for each.  An input given no gradient gets none.
void put_grads(const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads);
inline void put_grad(const Tensor& input, const Tensor& grad) { put_grads({input}, {grad}); }

// One grad transform traced for one bound symbol (used by the grad pass).
struct ExpandedGradTransform {
  OpCall original;                    // the op's call in the forward trace
  std::vector<BoundSymbol> forward;   // replaces the op in the forward trace; makes the op's outputs
  std::vector<BoundSymbol> backward;  // reads get_grad's values; makes the gradients
  std::vector<std::pair<int64_t, size_t>> grad_of;  // get_grad's proxy id -> which output's gradient
  std::vector<std::pair<Tensor, Tensor>> put;       // (input, its gradient) as put_grads gave them

  // Records the backward part again (in the recording that calls it), with
  // `output_grads` as get_grad's values; returns a gradient per argument of
  // `args` (undefined where none was put).
  std::vector<Tensor> replay_backward(const std::vector<Value>& args, const std::vector<Tensor>& output_grads) const;
};

using GradTransformFn = std::function<std::vector<Tensor>(const std::vector<Value>&)>;

// Traces `transform` on the arguments of `b`; its results stand for b's outputs.
ExpandedGradTransform expand_grad_transform(const GradTransformFn& transform, const BoundSymbol& b,
                                            ProxyNames& names);

// The forward bound symbols with each expanded op replaced by its forward part
// (found by the op's first output; nested ops are replaced where they stand).
std::vector<BoundSymbol> splice_forward(const std::vector<BoundSymbol>& bsyms,
                                        const std::unordered_map<int64_t, const ExpandedGradTransform*>& by_output);

}  // namespace volt::jit
