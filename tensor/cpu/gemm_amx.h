// The AMX path of the bf16 GEMM (tensor/cpu/gemm_bf16.h), in
// tensor/cpu/gemm_amx.cpp: Intel's tile registers and TMUL (tdpbf16ps), each
// instruction a (16 x 32) bf16 tile times a (32 x 16) one added into a
// (16 x 16) f32 tile.  Only that file is compiled for AMX; these functions
// are safe to call on any CPU.
#pragma once
#include <cstdint>
#include <memory>
#include <new>
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

// B (k, n; strides brs, bcs) packed once in the tiles' layout, for any
// number of products A B: the packing depends on B alone (not on A, m or the
// thread count), so a weight's B can be packed once per value of the weight
// (tensor/cpu/gemm_amx_weights.h keeps them).
struct AmxPackedB {
  struct Free {
    void operator()(uint16_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  int64_t k = 0, n = 0;
  std::unique_ptr<uint16_t[], Free> data;  // 64-byte aligned
  int64_t elems = 0;                       // bf16 in data
};

// B packed for gemm_amx_packed; k, n > 0.  Requires amx_supported().
std::shared_ptr<const AmxPackedB> amx_pack_b(const BF16* b, int64_t k, int64_t n, int64_t brs, int64_t bcs);

// C (m, n; ldc) = A (m, k; ars, acs) B, B packed by amx_pack_b (b.k == k):
// bit for bit what gemm_amx gives for the same B.  m > 0.
void gemm_amx_packed(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const AmxPackedB& b, float* c,
                     int64_t ldc);

// `iters` rounds of 4 independent tdpbf16ps on tiles alone (no memory);
// returns the flops done (16384 per instruction).  0 without AMX.
double amx_dot_loop(int64_t iters);

}  // namespace volt::cpu
