// The GEMM kernel sets of tensor/cpu_gemm.h: tensor/cpu_gemm_tiles.inc compiled
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

#include <volt/tensor/cpu_gemm.h>
#include <volt/tensor/cpu_threads.h>
#include <volt/tensor/error.h>

namespace volt::cpu {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define VOLT_GEMM_X86 1
#endif

namespace generic {
#include <volt/tensor/cpu_gemm_tiles.inc>
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
#include <volt/tensor/cpu_gemm_tiles.inc>
struct Ops {
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
  static __m256 broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  // max(x, 0) gives 0 for NaN and -0, as where(x > 0, x, 0) does.
  static __m256 relu(__m256 x) { return _mm256_max_ps(x, _mm256_setzero_ps()); }
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
#include <volt/tensor/cpu_gemm_tiles.inc>
struct Ops {
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, __m512 x) { _mm512_storeu_ps(p, x); }
  static __m512 broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 relu(__m512 x) { return _mm512_max_ps(x, _mm512_setzero_ps()); }
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

// ---- a short k (a weight gradient at a small batch) ----
// C = A B with k <= 16 and B's rows contiguous: the k rows of B over a block of
// NV x 16 columns stay in registers while every row of C in turn is made, one
// chain of fused multiply-adds over k ascending from zero, then the bias and the
// ReLU -- what tile_b_rows computes, without its per-tile set-up and stores.
template <int K, int NV>
void rank_k_block(const float* a, int64_t m, int64_t ars, int64_t acs, const float* b, int64_t brs, int64_t cols,
                  float* c, int64_t ldc, const float* bias, bool relu) {
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v)
    mask[v] = __mmask16(cols >= 16 * (v + 1) ? 0xffffu : cols > 16 * v ? (1u << (cols - 16 * v)) - 1 : 0u);
  __m512 bk[K][NV], bias_v[NV];
  for (int kk = 0; kk < K; ++kk)
    for (int v = 0; v < NV; ++v) bk[kk][v] = _mm512_maskz_loadu_ps(mask[v], b + kk * brs + 16 * v);
  for (int v = 0; v < NV; ++v) bias_v[v] = bias ? _mm512_maskz_loadu_ps(mask[v], bias + 16 * v) : _mm512_setzero_ps();
  auto store = [&](float* ci, __m512 x, int v) {
    if (bias) x = _mm512_add_ps(x, bias_v[v]);
    if (relu) x = Ops::relu(x);
    _mm512_mask_storeu_ps(ci + 16 * v, mask[v], x);
  };
  constexpr int R = NV == 2 ? 6 : 8;  // rows at a time: independent chains
  int64_t i = 0;
  for (; i + R <= m; i += R) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int kk = 0; kk < K; ++kk)
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(a[(i + r) * ars + kk * acs]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bk[kk][v], acc[r][v]);
      }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) store(c + (i + r) * ldc, acc[r][v], v);
  }
  for (; i < m; ++i) {
    __m512 acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
    for (int kk = 0; kk < K; ++kk) {
      const __m512 x = _mm512_set1_ps(a[i * ars + kk * acs]);
      for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(x, bk[kk][v], acc[v]);
    }
    for (int v = 0; v < NV; ++v) store(c + i * ldc, acc[v], v);
  }
}

template <int K>
void rank_k_columns(const float* a, int64_t m, int64_t ars, int64_t acs, const float* b, int64_t n, int64_t brs,
                    float* c, int64_t ldc, const float* bias, bool relu, const BlockHook<float>& done) {
  constexpr int NV = K <= 8 ? 2 : 1;  // k x NV registers of B: at most 16
  constexpr int64_t width = 16 * NV;
  over_tiles((n + width - 1) / width, m * K * width, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j = t * width, cols = std::min(width, n - j);
      rank_k_block<K, NV>(a, m, ars, acs, b + j, brs, cols, c + j, ldc, bias ? bias + j : nullptr, relu);
      if (done.fn) done.fn(done.ctx, c + j, ldc, 0, j, m, cols);
    }
  });
}

template <int K = 1>
void rank_k(int64_t k, const float* a, int64_t m, int64_t ars, int64_t acs, const float* b, int64_t n, int64_t brs,
            float* c, int64_t ldc, const float* bias, bool relu, const BlockHook<float>& done) {
  if constexpr (K < kSkinny)
    if (k != K) return rank_k<K + 1>(k, a, m, ars, acs, b, n, brs, c, ldc, bias, relu, done);
  rank_k_columns<K>(a, m, ars, acs, b, n, brs, c, ldc, bias, relu, done);
}

// ---- dot products (linear's x W^T at a small batch) ----
// tile_dots<float, R, 4> with every operand in a register: the 16 lanes of
// each of the 16 sums added in order (0 + lane 0 + lane 1 + ... + lane 15) for
// all of them at once after a transposition, so the same bits.
template <int R>
void dots_tile(const float* a, int64_t ars, const float* b, int64_t bcs, int64_t k, float* c, int64_t ldc,
               const float* bias, bool relu) {
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    __m512 bv[4];
    for (int j = 0; j < 4; ++j) {
      bv[j] = _mm512_loadu_ps(b + j * bcs + kk);
      // Kept in a register: left alone, GCC reads each vector of B again as
      // the memory operand of all four FMAs using it (20 loads for 16 FMAs,
      // more than the core loads per cycle).
      __asm__("" : "+v"(bv[j]));
    }
    for (int i = 0; i < R; ++i) {
      __m512 av = _mm512_loadu_ps(a + i * ars + kk);
      __asm__("" : "+v"(av));
      for (int j = 0; j < 4; ++j) acc[i * 4 + j] = _mm512_fmadd_ps(av, bv[j], acc[i * 4 + j]);
    }
  }
  transpose16(acc);  // acc[l]: lane l of every sum
  __m512 sum = _mm512_setzero_ps();
  for (int l = 0; l < 16; ++l) sum = _mm512_add_ps(sum, acc[l]);
  alignas(64) float s[16];
  _mm512_store_ps(s, sum);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < 4; ++j) {
      float v = s[i * 4 + j];
      for (int64_t r = kk; r < k; ++r) v = std::fma(a[i * ars + r], b[j * bcs + r], v);
      c[i * ldc + j] = epilogue(v, bias, j, relu);
    }
}

struct Dots512 {
  template <class T, int R, int NC>
  static void tile(const T* a, int64_t ars, const T* b, int64_t bcs, int64_t k, T* c, int64_t ldc, const T* bias,
                   bool relu) {
    if constexpr (std::is_same_v<T, float> && NC == 4 && R <= 4) dots_tile<R>(a, ars, b, bcs, k, c, ldc, bias, relu);
    else tile_dots<T, R, NC>(a, ars, b, bcs, k, c, ldc, bias, relu);
  }
};

// ---- few rows, a long k (an input gradient at a small batch) ----
// tile_b_rows<float, R> on 32 columns at once, B's two vectors per row of k
// held in registers for all R rows: one chain of fused multiply-adds per
// element from zero, k ascending, then the bias and the ReLU -- the same bits.
template <int R>
void rows_tile(const float* a, int64_t ars, int64_t acs, const float* b, int64_t brs, int64_t k, float* c,
               int64_t ldc, int64_t cols, const float* bias, bool relu) {
  const __mmask16 m0 = __mmask16(cols >= 16 ? 0xffffu : (1u << cols) - 1);
  const __mmask16 m1 = __mmask16(cols >= 32 ? 0xffffu : cols > 16 ? (1u << (cols - 16)) - 1 : 0u);
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 b0 = _mm512_maskz_loadu_ps(m0, b + kk * brs), b1 = _mm512_maskz_loadu_ps(m1, b + kk * brs + 16);
    __asm__("" : "+v"(b0), "+v"(b1));  // in registers, not read again per FMA
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * ars + kk * acs]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    __m512 x0 = acc[r][0], x1 = acc[r][1];
    if (bias) {
      x0 = _mm512_add_ps(x0, bias0);
      x1 = _mm512_add_ps(x1, bias1);
    }
    if (relu) {
      x0 = Ops::relu(x0);
      x1 = Ops::relu(x1);
    }
    _mm512_mask_storeu_ps(c + r * ldc, m0, x0);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, x1);
  }
}

void rows_of_b(const float* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const float* b, int64_t n,
               int64_t brs, float* c, int64_t ldc, const float* bias, bool relu, const BlockHook<float>& done) {
  over_tiles((n + 31) / 32, m * k * 32, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j = t * 32, cols = std::min<int64_t>(32, n - j);
      for (int64_t i = 0; i < m; i += 8) {
        const int64_t rows = std::min<int64_t>(8, m - i);
        with_rows(rows, [&]<int R>() {
          rows_tile<R>(a + i * ars, ars, acs, b + j, brs, k, c + i * ldc + j, ldc, cols, bias ? bias + j : nullptr,
                       relu);
        });
        if (done.fn) done.fn(done.ctx, c + i * ldc + j, ldc, i, j, rows, cols);
      }
    }
  });
}

// skinny<float>, with the short-k products above.  The dot-product layout keeps
// its own kernel (its sums are in another order), as skinny chooses it first.
bool skinny_f32(const float* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const float* b, int64_t n,
                int64_t brs, int64_t bcs, float* c, int64_t ldc, const float* bias, bool relu,
                const BlockHook<float>& done) {
  const bool dots = m <= kSkinny && acs == 1 && brs == 1 && bcs >= k;
  if (!dots && k >= 1 && k <= kSkinny && bcs == 1 && brs >= n) {
    rank_k(k, a, m, ars, acs, b, n, brs, c, ldc, bias, relu, done);
    return true;
  }
  if (!dots && m <= kSkinny && bcs == 1 && brs >= n) {
    rows_of_b(a, m, k, ars, acs, b, n, brs, c, ldc, bias, relu, done);
    return true;
  }
  return skinny<float, Dots512>(a, m, k, ars, acs, b, n, brs, bcs, c, ldc, bias, relu, done);
}

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
