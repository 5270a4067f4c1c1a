// The bf16 linear's f32 sums (tensor/cpu/matmul_bf16.cpp), for a caller that
// rounds them itself: the jit's GEMM epilogue reads them and rounds each to
// bf16 as it loads it (jit/rewrites/gemm_epilogue.h), where the op stores
// them rounded and its reader loads them back.
#pragma once

#include <volt/tensor/tensor.h>

namespace volt::cpu {

// sums (*, n) f32, contiguous = x (*, k) w^T (+ bias), x, w and bias bf16 on
// the CPU: the bf16 GEMM's sums with the bias added in f32, exactly the
// values run_bf16_matmul (half.h) rounds once into a bf16 linear's output.
void bf16_linear_sums(const Tensor& x, const Tensor& w, const Tensor* bias, float* sums);

}  // namespace volt::cpu
