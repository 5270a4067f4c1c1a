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

// The same for a bf16 matmul or linear on the CPU, with the gradient of each
// argument i where wide[i] is set made in f32 from the f32 sums of its
// product (matmul's out_dtype=f32), never rounded to bf16: the gradient of a
// weight that is a bf16 cast of an f32 master weight, which gets it in f32.
// Other calls ignore `wide`.
std::vector<Tensor> vjp_wide(const OpCall& call, const Tensor& g, const std::vector<bool>& wide);
// Whether vjp_wide() can make argument i's gradient in f32 (a bf16 matmul or
// linear on the CPU, argument i a tensor: for linear, weight or bias).
bool has_wide_gradient(const OpCall& call, size_t i);

// Whether the prim has a derivative at all (comparisons, argmax, uniform do not).
bool is_differentiable(OpId op);

}  // namespace volt::autograd
