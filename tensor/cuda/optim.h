// Fused Adam and SGD for CUDA parameters: one kernel launch updates every
// parameter of a step (a table of pointers passed by value, blockIdx.y picks
// the parameter), instead of a chain of elementwise ops per tensor.
// Plain C++: nn/optim.cpp includes it in any build and calls it only for CUDA tensors.
#pragma once
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::cuda {

// One parameter's Adam update; step_size and bias_correction2_sqrt depend on its step count.
struct AdamSlot {
  Tensor p, g, m, v;  // same shape, dtype and device; contiguous
  double step_size = 0, bias_correction2_sqrt = 1;
};
// The rule of nn::Adam (nn/optim.h), evaluated in the same order as its CPU kernel.
void fused_adam(const std::vector<AdamSlot>& slots, double beta1, double beta2, double eps, double weight_decay);

struct SGDSlot {
  Tensor p, g, buf;  // buf undefined without momentum
  bool first_step = false;
};
void fused_sgd(const std::vector<SGDSlot>& slots, double lr, double momentum, double weight_decay);

}  // namespace volt::cuda
