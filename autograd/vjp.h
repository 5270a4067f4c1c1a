// One VJP rule per differentiable prim, written against the Tensor API.  Eager
// backward calls it on real tensors; the jit's grad pass calls it on proxies and
// so records the backward trace: one source of truth for derivatives.
#pragma once
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt::autograd {

// Gradients w.r.t. each argument of `call` (undefined for scalars and
// non-differentiable arguments), given the gradient `g` of its output.
std::vector<Tensor> vjp(const OpCall& call, const Tensor& g);
// The same, where the rule may read the call's `outputs` (the jit's grad pass
// saves them): a convolution with its ReLU fused takes the mask from its
// output's sign instead of running the forward again.
std::vector<Tensor> vjp(const OpCall& call, const Tensor& g, const std::vector<Tensor>& outputs);

// Whether the prim has a derivative at all (comparisons, argmax, uniform do not).
bool is_differentiable(OpId op);

}  // namespace volt::autograd
