// Contiguous f32 <-> bf16 conversion in vectors (tensor/cpu/convert_bf16.cpp),
// bit for bit the scalar rule of tensor/half.inc: round to nearest even, NaN
// stays NaN (sign kept, quiet bit set), subnormals rounded exactly.
//
//   volt::cpu::f32_to_bf16(src, dst, n);   // src: (n) f32 -> dst: (n) bf16
//
// AVX-512F does the rounding as integer operations on 16 lanes at a time (the
// AVX512_BF16 instruction vcvtneps2bf16 is not used: it treats subnormal
// inputs as zero, which the scalar rule does not); other CPUs run the scalar
// rule.  Neither splits over threads: callers do.
#pragma once
#include <cstdint>

#include <volt/tensor/half.h>

namespace volt::cpu {

// dst[i] = BF16::from_float(src[i]) for i < n.
void f32_to_bf16(const float* src, BF16* dst, int64_t n);
// dst[i] = src[i].to_float() for i < n (exact).
void bf16_to_f32(const BF16* src, float* dst, int64_t n);

// Whether the two functions above run the AVX-512 kernels on this CPU.
bool convert_bf16_vectorised();

}  // namespace volt::cpu
