// The CPU's bf16 GEMM (tensor/cpu/gemm_bf16.cpp): bf16 operands, f32 sums.
//
// Three paths, chosen at run time:
//   amx     Intel AMX tiles (tensor/cpu/gemm_amx.h): each tdpbf16ps multiplies
//           a (16 x 32) bf16 tile by a (32 x 16) one into (16 x 16) f32 sums.
//   dpbf16  AVX512_BF16's vdpbf16ps: each instruction multiplies 16 pairs of
//           bf16 and adds both products into 16 f32 sums (12 x 32 tiles).
//   f32     A and B widened to f32 (exactly), then the f32 GEMM (gemm.h).
// By default the first of them this CPU (and its OS, for AMX) has;
// VOLT_BF16_GEMM=amx|dpbf16|f32 picks one (amx or dpbf16 is an error on a CPU
// without it).  VOLT_LOG=gemm names the path in use once, and says so when
// the CPU has AMX but the OS refused it.  The paths differ only in the order
// the products are summed.
#pragma once
#include <cstdint>

#include <volt/tensor/half.h>

namespace volt::cpu {

enum class Bf16Gemm { amx, dpbf16, f32 };

const char* bf16_gemm_name(Bf16Gemm path);
bool bf16_dot_supported();      // whether this CPU (and its OS) has AVX512_BF16
bool bf16_amx_supported();      // whether this CPU has AMX-BF16 and the OS grants its tiles
Bf16Gemm bf16_gemm();           // the path in use
void set_bf16_gemm(Bf16Gemm p);  // throws volt::Error for amx or dpbf16 on a CPU without it

// C (m, n; row stride ldc >= n) = A (m, k; element strides ars, acs) B (k, n;
// brs, bcs), in f32.  C must not overlap A or B.
void gemm_bf16(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n,
               int64_t brs, int64_t bcs, float* c, int64_t ldc);

// The dpbf16 kernel on registers alone: `iters` rounds of 24 independent
// vdpbf16ps; returns the flops done (64 per instruction).  0 without AVX512_BF16.
double bf16_dot_loop(int64_t iters);

// The amx kernel on tiles alone: `iters` rounds of 4 independent tdpbf16ps;
// returns the flops done (16384 per instruction).  0 without AMX.
double bf16_amx_loop(int64_t iters);

}  // namespace volt::cpu
