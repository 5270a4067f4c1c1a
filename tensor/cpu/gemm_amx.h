// The AMX path of the bf16 GEMM (tensor/cpu/gemm_bf16.h), in
// tensor/cpu/gemm_amx.cpp: Intel's tile registers and TMUL (tdpbf16ps), each
// instruction a (16 x 32) bf16 tile times a (32 x 16) one added into a
// (16 x 16) f32 tile.  Only that file is compiled for AMX; these functions
// are safe to call on any CPU.
#pragma once
#include <cstdint>
#include <string>

#include <volt/tensor/half.h>

namespace volt::cpu {

// Whether this CPU has AMX-BF16 and AMX-TILE (CPUID leaf 7) and the OS
// granted this process the tile data (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM),
// asked once per process; the grant covers all its threads).
bool amx_supported();
// Why AMX is not used: "" when it is, else what CPUID or the OS said.
const std::string& amx_unavailable_reason();
// Whether the CPU has AMX but the OS refused it.
bool amx_refused();

// C (m, n; row stride ldc) = A (m, k; strides ars, acs) B (k, n; brs, bcs)
// on the tiles; m, n, k > 0.  Requires amx_supported().
void gemm_amx(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n, int64_t brs,
              int64_t bcs, float* c, int64_t ldc);

// `iters` rounds of 4 independent tdpbf16ps on tiles alone (no memory);
// returns the flops done (16384 per instruction).  0 without AMX.
double amx_dot_loop(int64_t iters);

}  // namespace volt::cpu
