// The bf16 GEMM of tensor/cpu/gemm_bf16.h.  The dpbf16 path packs A and B into
// pairs along k, as vdpbf16ps reads them: a 32-bit word holds the bf16 of k =
// 2p (low half) and 2p + 1 (high half).  A panel is MR rows of words, k-major;
// a B panel is NR columns of words, k-major.  Each step of the 12 x 32 tile
// broadcasts one word of A per row and multiplies it into two vectors of 16
// words of B: 24 vdpbf16ps on 24 f32 accumulators.  Odd k and partial tiles
// are padded with zeros.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/gemm_amx.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/error.h>
#include <volt/tensor/log.h>

namespace volt::cpu {
namespace {

constexpr int MR = 12, NR = 32;
constexpr int64_t kKc = 512;  // k per packed block (an even number)
constexpr int64_t kNc = 512;  // columns per packed block of B

// A word of two bf16 along k: (x[0], x[step]), or (x[0], 0) at an odd end.
inline uint32_t pair(const BF16* x, int64_t step, bool second) {
  const uint32_t hi = second ? x[step].bits : 0;
  return uint32_t(x[0].bits) | (hi << 16);
}

// Packs rows [0, live) of a (R rows, element strides rs along rows, ks along
// k) for k in [0, kc) into dst[p R + r], zeros past `live`.
void pack_panel(const BF16* x, int64_t live, int64_t kc, int64_t rs, int64_t ks, int R, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t p = 0; p < kp; ++p) {
    const bool second = 2 * p + 1 < kc;
    uint32_t* d = dst + p * R;
    for (int64_t r = 0; r < live; ++r) d[r] = pair(x + r * rs + 2 * p * ks, ks, second);
    for (int64_t r = live; r < R; ++r) d[r] = 0;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define VOLT_BF16_X86 1
#endif

#ifdef VOLT_BF16_X86
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// C[0:rows, 0:cols] (= or +=) the packed panels over kp words of k.
void tile_dpbf16(const uint32_t* ap, const uint32_t* bp, int64_t kp, float* c, int64_t ldc, int rows, int cols,
                 bool accumulate) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = as_bh(_mm512_loadu_si512(bp + p * NR));
    const __m512bh b1 = as_bh(_mm512_loadu_si512(bp + p * NR + 16));
    const uint32_t* a = ap + p * MR;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = as_bh(_mm512_set1_epi32(int(a[r])));
      c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
    }
  }
  const __mmask16 m0 = __mmask16(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 m1 = __mmask16(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  for (int r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    if (accumulate) {
      c0[r] = _mm512_add_ps(c0[r], _mm512_maskz_loadu_ps(m0, row));
      c1[r] = _mm512_add_ps(c1[r], _mm512_maskz_loadu_ps(m1, row + 16));
    }
    _mm512_mask_storeu_ps(row, m0, c0[r]);
    _mm512_mask_storeu_ps(row + 16, m1, c1[r]);
  }
}

double dot_loop_dpbf16(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh x = as_bh(_mm512_set1_epi32(0x3F803F80)), y = as_bh(_mm512_set1_epi32(0x3F7F3F7F));
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 24 * 64;
}

#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // VOLT_BF16_X86

// C (m, n) = A B through the packed dpbf16 tiles: blocks of kc along k and nc
// columns; B's block packed once (split over threads by panel), then row
// panels of A split over threads, each packed by its thread.
void gemm_dpbf16(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n,
                 int64_t brs, int64_t bcs, float* c, int64_t ldc) {
#ifdef VOLT_BF16_X86
  std::vector<uint32_t> bpack;
  const int64_t row_panels = (m + MR - 1) / MR;
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0), col_panels = (nc + NR - 1) / NR;
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0), kp = (kc + 1) / 2;
      bpack.resize(size_t(col_panels * kp * NR));
      parallel_for(col_panels, 4, [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q)
          pack_panel(b + k0 * brs + (j0 + q * NR) * bcs, std::min<int64_t>(NR, nc - q * NR), kc, bcs, brs, NR,
                     bpack.data() + q * kp * NR);
      });
      parallel_for(row_panels, 2, [&](int64_t i0, int64_t i1) {
        std::vector<uint32_t> apack(size_t(kp * MR));
        for (int64_t i = i0; i < i1; ++i) {
          const int rows = int(std::min<int64_t>(MR, m - i * MR));
          pack_panel(a + i * MR * ars + k0 * acs, rows, kc, ars, acs, MR, apack.data());
          for (int64_t q = 0; q < col_panels; ++q)
            tile_dpbf16(apack.data(), bpack.data() + q * kp * NR, kp, c + i * MR * ldc + j0 + q * NR, ldc, rows,
                        int(std::min<int64_t>(NR, nc - q * NR)), k0 > 0);
        }
      });
    }
  }
#else
  (void)a, (void)m, (void)k, (void)ars, (void)acs, (void)b, (void)n, (void)brs, (void)bcs, (void)c, (void)ldc;
  VOLT_FAIL("gemm_bf16", "the dpbf16 kernel needs an x86-64 build");
#endif
}

// A (rows, cols; strides rs, cs) widened into a contiguous f32 buffer.
std::vector<float> widen(const BF16* x, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  std::vector<float> out(size_t(rows * cols));
  parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < cols; ++j) out[size_t(r * cols + j)] = x[r * rs + j * cs].to_float();
  });
  return out;
}

Bf16Gemm& current() {
  static Bf16Gemm path = [] {
    Bf16Gemm p = bf16_amx_supported() ? Bf16Gemm::amx : bf16_dot_supported() ? Bf16Gemm::dpbf16 : Bf16Gemm::f32;
    if (const char* e = std::getenv("VOLT_BF16_GEMM"); e && *e) {
      const std::string s = e;
      VOLT_CHECK(s == "amx" || s == "dpbf16" || s == "f32", "VOLT_BF16_GEMM",
                 "expects amx, dpbf16 or f32, got '" << s << "'");
      p = s == "amx" ? Bf16Gemm::amx : s == "dpbf16" ? Bf16Gemm::dpbf16 : Bf16Gemm::f32;
      VOLT_CHECK(p != Bf16Gemm::dpbf16 || bf16_dot_supported(), "VOLT_BF16_GEMM",
                 "asks for dpbf16, which this CPU does not have (no AVX512_BF16)");
      VOLT_CHECK(p != Bf16Gemm::amx || bf16_amx_supported(), "VOLT_BF16_GEMM",
                 "asks for amx, which is not available: " << amx_unavailable_reason());
    }
    return p;
  }();
  return path;
}

const char* describe(Bf16Gemm p) {
  switch (p) {
    case Bf16Gemm::amx: return "amx (AMX tiles, tdpbf16ps, f32 sums)";
    case Bf16Gemm::dpbf16: return "dpbf16 (AVX512_BF16 vdpbf16ps, f32 sums)";
    case Bf16Gemm::f32: break;
  }
  return "f32 (bf16 widened to f32, f32 GEMM kernels)";
}

// The log lines, the first time a bf16 GEMM runs: which path, and an OS
// that refused the CPU's AMX.
void note_path(Bf16Gemm p) {
  static std::atomic<bool> said{false};
  if (!log_enabled("gemm") || said.exchange(true)) return;
  if (amx_refused()) std::fprintf(stderr, "volt: AMX not used: %s\n", amx_unavailable_reason().c_str());
  std::fprintf(stderr, "volt: bf16 GEMM: %s\n", describe(p));
}

}  // namespace

const char* bf16_gemm_name(Bf16Gemm path) {
  return path == Bf16Gemm::amx ? "amx" : path == Bf16Gemm::dpbf16 ? "dpbf16" : "f32";
}

bool bf16_dot_supported() {
#ifdef VOLT_BF16_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_amx_supported() { return amx_supported(); }

Bf16Gemm bf16_gemm() { return current(); }

void set_bf16_gemm(Bf16Gemm p) {
  VOLT_CHECK(p != Bf16Gemm::dpbf16 || bf16_dot_supported(), "set_bf16_gemm", "this CPU has no AVX512_BF16");
  VOLT_CHECK(p != Bf16Gemm::amx || amx_supported(), "set_bf16_gemm",
             "the amx path is not available: " << amx_unavailable_reason());
  current() = p;
}

void gemm_bf16(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n,
               int64_t brs, int64_t bcs, float* c, int64_t ldc) {
  VOLT_CHECK(m >= 0 && k >= 0 && n >= 0 && ldc >= n, "gemm_bf16", "expects sizes >= 0 and a row stride ldc >= n");
  if (m == 0 || n == 0) return;
  const Bf16Gemm p = current();
  note_path(p);
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  if (p == Bf16Gemm::amx) return gemm_amx(a, m, k, ars, acs, b, n, brs, bcs, c, ldc);
  if (p == Bf16Gemm::dpbf16) return gemm_dpbf16(a, m, k, ars, acs, b, n, brs, bcs, c, ldc);
  const std::vector<float> a32 = widen(a, m, k, ars, acs), b32 = widen(b, k, n, brs, bcs);
  gemm_f32(a32.data(), m, k, k, 1, b32.data(), n, n, 1, c, ldc);
}

double bf16_dot_loop(int64_t iters) {
#ifdef VOLT_BF16_X86
  if (bf16_dot_supported()) return dot_loop_dpbf16(iters);
#endif
  (void)iters;
  return 0;
}

double bf16_amx_loop(int64_t iters) { return amx_dot_loop(iters); }

}  // namespace volt::cpu
