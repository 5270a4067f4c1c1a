// The CPU's bf16 GEMM (tensor/cpu/gemm_bf16.cpp): bf16 operands, f32 sums.
//
// Two paths, chosen at run time:
//   dpbf16  AVX512_BF16's vdpbf16ps: each instruction multiplies 16 pairs of
//           bf16 and adds both products into 16 f32 sums (12 x 32 tiles).
//   f32     A and B widened to f32 (exactly), then the f32 GEMM (gemm.h).
// By default dpbf16 where the CPU has it; VOLT_BF16_GEMM=f32|dpbf16 picks one
// (dpbf16 is an error on a CPU without it).  VOLT_LOG=gemm names the path in
// use once.  The two differ only in the order the products are summed.
#pragma once
#include <cstdint>

#include <volt/tensor/half.h>

namespace volt::cpu {

enum class Bf16Gemm { dpbf16, f32 };

const char* bf16_gemm_name(Bf16Gemm path);
bool bf16_dot_supported();      // whether this CPU (and its OS) has AVX512_BF16
Bf16Gemm bf16_gemm();           // the path in use
void set_bf16_gemm(Bf16Gemm p);  // throws volt::Error for dpbf16 on a CPU without it

// C (m, n; row stride ldc >= n) = A (m, k; element strides ars, acs) B (k, n;
// brs, bcs), in f32.  C must not overlap A or B.
void gemm_bf16(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n,
               int64_t brs, int64_t bcs, float* c, int64_t ldc);

// The dpbf16 kernel on registers alone: `iters` rounds of 24 independent
// vdpbf16ps; returns the flops done (64 per instruction).  0 without AVX512_BF16.
double bf16_dot_loop(int64_t iters);

}  // namespace volt::cpu
