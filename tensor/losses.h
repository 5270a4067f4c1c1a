// The regression and binary losses of PyTorch, elementwise over input and
// target of one shape, then reduced (Reduction::Mean by default, Sum, None):
//
//   mse_loss(x, y)                  l = (x - y)^2
//   smooth_l1_loss(x, y, beta)      l = 0.5 (x - y)^2 / beta   where |x - y| < beta
//                                       |x - y| - 0.5 beta     elsewhere (beta 0: |x - y|)
//   binary_cross_entropy_with_logits(x, y, {.weight, .pos_weight})
//                                   l = -w [pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))]
//                                     = w [(1 - y) x + (pw y + 1 - y) softplus(-x)]
//     weight w and pos_weight pw broadcast to the input (pos_weight (C) is one
//     weight per class of the last dim); undefined means 1.
//
// Each is a composition of elementwise ops and a reduction, so autograd, the
// jit, compile_step and the lazy device run them as the ops they know.
//
//   volt::Tensor loss = volt::smooth_l1_loss(pred, target, volt::kMean, 0.5);   // pred, target: (N) -> ()
#pragma once
#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/tensor.h>

namespace volt {

// LibTorch's spelling of the reductions: torch::kMean and so on.
inline constexpr Reduction kNone = Reduction::None;
inline constexpr Reduction kMean = Reduction::Mean;
inline constexpr Reduction kSum = Reduction::Sum;

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// beta >= 0
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

struct BCEWithLogitsOptions {
  Tensor weight{};      // broadcast to the input; undefined: 1
  Tensor pos_weight{};  // broadcast to the input (one per class of the last dim); undefined: 1
  Reduction reduction = Reduction::Mean;
};
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options = {});

}  // namespace volt
