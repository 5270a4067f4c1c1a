// The GEMM kernel sets of tensor/cpu/gemm.h: tensor/cpu/gemm_tiles.inc compiled
// for AVX-512, for AVX2 + FMA and for the compiler's baseline, each in its own
// namespace under `#pragma GCC target`, and the choice among them at run time.
// The library is built for the baseline: only these functions use wider sets,
// and only on a CPU that has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/error.h>

namespace volt::cpu {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define VOLT_GEMM_X86 1
#endif

namespace generic {
#include <volt/tensor/cpu/gemm_tiles.inc>
const GemmKernels<float> f32 = {8, 32, packed_tile_loops<float, 8, 32>, skinny<float>,
                                 pack_rows_loops<float>, pack_cols_loops<float>};
const GemmKernels<double> f64 = {8, 16, packed_tile_loops<double, 8, 16>, skinny<double>,
                                  pack_rows_loops<double>, pack_cols_loops<double>};
}  // namespace generic

#ifdef VOLT_GEMM_X86

#ifdef __clang__  // clang's spelling of GCC's target pragma
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
#include <volt/tensor/cpu/gemm_tiles.inc>
struct Ops {
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
  static __m256 broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  // max(x, 0) gives 0 for NaN and -0, as where(x > 0, x, 0) does.
  // max returns its second operand when either is NaN, so NaN stays NaN; + 0
  // turns a -0 into +0 as the scalar epilogue does.
  static __m256 relu(__m256 x) {
    const __m256 z = _mm256_setzero_ps();
    return _mm256_add_ps(_mm256_max_ps(z, x), z);
  }
};
// 6 x 16: 12 accumulators of the 16 registers.
const GemmKernels<float> f32 = {6, 16, packed_tile_vec<__m256, 8, 6, 2, Ops>, skinny<float>,
                                 pack_rows_loops<float>, pack_cols_loops<float>};
const GemmKernels<double> f64 = {6, 8, packed_tile_loops<double, 6, 8>, skinny<double>,
                                  pack_rows_loops<double>, pack_cols_loops<double>};
}  // namespace avx2
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
#endif
namespace avx512 {
#include <volt/tensor/cpu/gemm_tiles.inc>
struct Ops {
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, __m512 x) { _mm512_storeu_ps(p, x); }
  static __m512 broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 relu(__m512 x) {  // as the __m256 one
    const __m512 z = _mm512_setzero_ps();
    return _mm512_add_ps(_mm512_max_ps(z, x), z);
  }
};

// Transposes the 16 x 16 block in r (r[i] = row i) in place (r[j] = column j):
// pairs of rows interleaved, then pairs of pairs, then the 128-bit lanes.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // c[g][q]: lane L holds column 4 L + q of rows 4 g .. 4 g + 3.
  __m512 c[4][4];
  for (int g = 0; g < 4; ++g) {
    c[g][0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    c[g][1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    c[g][2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    c[g][3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 u0 = _mm512_shuffle_f32x4(c[0][q], c[1][q], 0x44), u1 = _mm512_shuffle_f32x4(c[0][q], c[1][q], 0xEE);
    const __m512 u2 = _mm512_shuffle_f32x4(c[2][q], c[3][q], 0x44), u3 = _mm512_shuffle_f32x4(c[2][q], c[3][q], 0xEE);
    r[q] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    r[4 + q] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    r[8 + q] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
}

// GemmKernels::pack_rows with 16 x 16 transpositions: rows in groups of 16
// (past `live`, zeros), k in strips of 16 (the last one masked).
void pack_rows_f32(const float* x, int64_t live, int64_t kc, int64_t rs, int R, float* d) {
  for (int r0 = 0; r0 < R; r0 += 16) {
    const int rows = std::min(16, R - r0);
    const __mmask16 store_mask = __mmask16((1u << rows) - 1);
    const int64_t real = std::clamp<int64_t>(live - r0, 0, rows);
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int cols = int(std::min<int64_t>(16, kc - k0));
      const __mmask16 load_mask = __mmask16((1u << cols) - 1);
      __m512 v[16];
      for (int i = 0; i < 16; ++i)
        v[i] = i < real ? _mm512_maskz_loadu_ps(load_mask, x + (r0 + i) * rs + k0) : _mm512_setzero_ps();
      transpose16(v);
      for (int j = 0; j < cols; ++j) _mm512_mask_storeu_ps(d + (k0 + j) * R + r0, store_mask, v[j]);
    }
  }
}

// GemmKernels::pack_cols with masked vector moves of 16.
void pack_cols_f32(const float* x, int64_t live, int64_t kc, int64_t cs, int R, float* d) {
  for (int64_t kk = 0; kk < kc; ++kk)
    for (int r0 = 0; r0 < R; r0 += 16) {
      const int64_t real = std::clamp<int64_t>(live - r0, 0, 16);
      const __m512 v = _mm512_maskz_loadu_ps(__mmask16((1u << real) - 1), x + kk * cs + r0);
      _mm512_mask_storeu_ps(d + kk * R + r0, __mmask16((1u << std::min(16, R - r0)) - 1), v);
    }
}

// The skinny products' own AVX-512 kernels (skinny_f32).
#include <volt/tensor/cpu/gemm_skinny_avx512.inc>

// 12 x 32: 24 accumulators of the 32 registers.
const GemmKernels<float> f32 = {12, 32, packed_tile_vec<__m512, 16, 12, 2, Ops>, skinny_f32, pack_rows_f32,
                                pack_cols_f32};
const GemmKernels<double> f64 = {8, 16, packed_tile_loops<double, 8, 16>, skinny<double>,
                                  pack_rows_loops<double>, pack_cols_loops<double>};
}  // namespace avx512
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // VOLT_GEMM_X86

Isa parse_isa(const std::string& s) {
  if (s == "avx512") return Isa::avx512;
  if (s == "avx2") return Isa::avx2;
  if (s == "generic") return Isa::generic;
  VOLT_FAIL("VOLT_CPU_ISA", "expects avx512, avx2 or generic, got '" + s + "'");
  return Isa::generic;
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::generic;
}

Isa& current() {
  static Isa isa = [] {
    const char* env = std::getenv("VOLT_CPU_ISA");
    if (!env || !*env) return best_isa();
    const Isa want = parse_isa(env);
    VOLT_CHECK(isa_supported(want), "VOLT_CPU_ISA",
               std::string("asks for ") + env + ", which this CPU does not have");
    return want;
  }();
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "generic";
  }
}

bool isa_supported(Isa isa) {
#ifdef VOLT_GEMM_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::avx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    case Isa::avx2: return avx2;
    default: return true;
  }
#else
  return isa == Isa::generic;
#endif
}

Isa isa() { return current(); }

void set_isa(Isa isa) {
  VOLT_CHECK(isa_supported(isa), "set_isa", std::string("this CPU has no ") + isa_name(isa));
  current() = isa;
}

const GemmKernels<float>& gemm_kernels_f32() {
  switch (current()) {
#ifdef VOLT_GEMM_X86
    case Isa::avx512: return avx512::f32;
    case Isa::avx2: return avx2::f32;
#endif
    default: return generic::f32;
  }
}

const GemmKernels<double>& gemm_kernels_f64() {
  switch (current()) {
#ifdef VOLT_GEMM_X86
    case Isa::avx512: return avx512::f64;
    case Isa::avx2: return avx2::f64;
#endif
    default: return generic::f64;
  }
}

}  // namespace volt::cpu
