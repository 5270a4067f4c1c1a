// Gradient clipping, as PyTorch's torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
//
//   loss.backward();
//   volt::Tensor norm = volt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//   opt.step();
//   norm.item<double>();   // the norm before clipping, read when wanted
//
// Both are written with volt ops and read nothing back to the host: the total
// norm and the clipping factor stay tensors, and every gradient is multiplied
// by the factor (1 when the norm is within max_norm), so they run eagerly on
// any device, record on the lazy device, and trace into a compiled training
// step (volt::jit::compile_step) as part of its one program.
#pragma once
#include <limits>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::nn::utils {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm_type-norm of the gradients (each parameter's norm, then the norm of
// those), every gradient scaled in place by min(1, max_norm / (total + 1e-6)).
// norm_type > 0, or kInfNorm for the largest absolute value.  Returns the total
// norm before clipping as a 0-d tensor of the gradients' (promoted) dtype, on
// the first gradient's device; 0 when no parameter has a gradient.
//
// A total norm that is Inf or NaN: with error_if_nonfinite (PyTorch's rule)
// it is a volt::Error naming clip_grad_norm_ and the norm, raised when the
// norm's value exists (eagerly at once; in a trace, a compiled step or a lazy
// graph when it runs) and before any gradient is scaled; without it, as
// PyTorch, every gradient is scaled by min(1, max_norm / (total + 1e-6)):
// 0 for an infinite norm (an infinite element becomes NaN), NaN for a NaN one.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Every gradient element clamped to [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace volt::nn::utils
