// The CPU's tiled attention kernels (tensor/cpu/attention.cpp); tensor/attention.h
// describes them.  Inputs are contiguous, f32, f64, bf16 or f16 (computed in f32;
// lse is f32 for the 16-bit types).
#pragma once
#include <vector>

#include <volt/tensor/attention.h>

namespace volt::cpu {

// q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev) -> {out (B, H, L, Ev), lse (B, H, L)}
std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p);
// -> {dq, dk, dv}
std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p);

}  // namespace volt::cpu
