// What volt's optimizers share (defined in nn/optim.cpp): the checks that pick
// a step's path, and the CPU Adam kernel that Adam and AdamW both run.
// Internal to nn/; not included by <volt/volt.h>.
#pragma once
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::nn::detail {

// Whether a step can run as one loop over raw host memory.
bool host_fast_path(const Tensor& p);
// Whether a step runs in the fused CUDA optimizer kernel (tensor/cuda/optim.h).
bool cuda_fused_path(const Tensor& p);
// The gradient as a contiguous tensor of the parameter's dtype and device.
Tensor grad_like(const Tensor& p);
// Whether step() is running under a tracer (volt::jit::compile_step): the
// parameters are traced values, and the update is recorded as volt ops.
bool traced(const std::vector<Tensor>& params);
// A 0-d f64 tensor on like's device.
Tensor scalar_f64(double v, const Tensor& like);
// An optimizer's or a schedule's rate, decay or epsilon: finite and >= 0
// (an infinite or NaN one would make every weight NaN a step later).
void check_non_negative(double v, const char* who, const char* what);
// State made before a module moved follows its parameter.
void follow_device(Tensor& state, const Tensor& p);

// One parameter's share of a CPU Adam step (contiguous host f32 or f64, same shape).
struct AdamHostSlot {
  Tensor p, g, m, v;
  double step_size = 0;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  double decay = 1;                  // p *= decay first (AdamW's 1 - lr * weight_decay; 1 for Adam)
  // p's bf16 copy that autocast's cast cache holds (tensor/autocast.h), or
  // none: written from the new p in the same pass, so the next forward under
  // autocast reads it without a cast.
  Tensor low;
};
// p's current bf16 copy in autocast's cast cache, when p is host f32 (ask
// before p is marked modified: the copy is current for p's value until then).
Tensor host_bf16_copy(const Tensor& p);
// With weight_decay (Adam's L2 term) added to g first:
//   p *= decay;  m += (1 - b1) (g - m);  v = b2 v + ((1 - b2) g) g
//   p += (-step_size m) / (sqrt(v) / bias_correction2_sqrt + eps)
// each operation rounded to the parameter's dtype, as PyTorch's tensor ops are;
// one parallel loop over all slots.  Each slot's `low` copy is written
// rounded from the new p, and marked current in the cast cache.
void adam_host_step(const std::vector<AdamHostSlot>& slots, double beta1, double beta2, double eps,
                    double weight_decay);

}  // namespace volt::nn::detail
