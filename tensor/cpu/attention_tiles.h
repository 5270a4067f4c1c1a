// The small dense pieces of the CPU flash attention (tensor/cpu/attention.cpp):
// a register-blocked tile product and a vectorised exp, written with GCC's
// vector extension so they compile to whatever vector width the build targets
// (64-byte vectors where the build targets AVX-512, 32 with AVX, 16 otherwise).
//
// Every product in attention is one of C (M x N) += A (M x K) * B (K x N)
// with small M, N (a block of 32 query rows or 64 keys, or head_dim) and the
// inner dimension K in memory order, so one kernel serves them all:
//   S = Q K^T (B = the transposed key block),  O += P V,  dP = dO V^T,
//   dQ += dS K,  dK += dS^T Q,  dV += (P o Z)^T dO.
// The kernel keeps a kRows x kVecs tile of C in registers and walks K: each
// step loads kVecs vectors of one row of B and broadcasts one element of A per
// row, so every loaded vector of B is used kRows times.  Each element of C
// sums its products in ascending k, with a fused multiply-add where the build
// targets one (one rounding per step instead of two).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace volt::cpu::attention_tiles {

#ifdef __AVX512F__
constexpr int kVecBytes = 64;
constexpr int kVecs = 4;  // vectors of C per row of the register tile
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr int kVecs = 2;
#else
constexpr int kVecBytes = 16;
constexpr int kVecs = 2;
#endif
constexpr int kRows = 4;  // rows of C per register tile

template <class T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(kVecBytes)));
  typedef int32_t bits __attribute__((vector_size(kVecBytes)));
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(kVecBytes)));
  typedef int64_t bits __attribute__((vector_size(kVecBytes)));
};
template <class T>
using V = typename Vec<T>::type;
template <class T>
constexpr int64_t kWidth = kVecBytes / sizeof(T);  // lanes of a vector

template <class T>
inline V<T> load(const T* p) {
  V<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(T* p, V<T> v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline V<T> splat(T x) {
  return V<T>{} + x;
}

// A's element (r, k) is A[r * ar + k * ak]: (lda, 1) for A itself, (1, lda)
// for the transpose of a stored matrix (dS^T, (P o Z)^T), read in place.
struct Strides {
  int64_t ar, ak;
};

// acc + x * b, fused where the instruction set has it.
template <class T>
inline V<T> madd(V<T> acc, V<T> x, V<T> b) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4)
    return (V<T>)_mm512_fmadd_ps((__m512)x, (__m512)b, (__m512)acc);
  else
    return (V<T>)_mm512_fmadd_pd((__m512d)x, (__m512d)b, (__m512d)acc);
#elif defined(__FMA__)
  if constexpr (sizeof(T) == 4)
    return (V<T>)_mm256_fmadd_ps((__m256)x, (__m256)b, (__m256)acc);
  else
    return (V<T>)_mm256_fmadd_pd((__m256d)x, (__m256d)b, (__m256d)acc);
#else
  return acc + x * b;
#endif
}

// C[r][0, NV * width) += sum_k A(r, k) B[k][.] for r < R: the register tile.
template <class T, int R, int NV>
void tile(const T* A, Strides a, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t K) {
  constexpr int64_t W = kWidth<T>;
  V<T> acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = load(C + r * ldc + v * W);
  for (int64_t k = 0; k < K; ++k) {
    V<T> b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load(B + k * ldb + v * W);
    for (int r = 0; r < R; ++r) {
      const V<T> x = splat(A[r * a.ar + k * a.ak]);
      for (int v = 0; v < NV; ++v) acc[r][v] = madd<T>(acc[r][v], x, b[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(C + r * ldc + v * W, acc[r][v]);
}

// Rows [0, R) of C, columns [c0, N): whole register tiles, then a plain loop
// over the columns that do not fill a vector.
template <class T, int R>
void tile_row(const T* A, Strides a, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t K, int64_t N) {
  constexpr int64_t W = kWidth<T>;
  int64_t c = 0;
  for (; c + kVecs * W <= N; c += kVecs * W) tile<T, R, kVecs>(A, a, B + c, ldb, C + c, ldc, K);
  if constexpr (kVecs > 2)
    for (; c + 2 * W <= N; c += 2 * W) tile<T, R, 2>(A, a, B + c, ldb, C + c, ldc, K);
  for (; c + W <= N; c += W) tile<T, R, 1>(A, a, B + c, ldb, C + c, ldc, K);
  for (int r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const T x = A[r * a.ar + k * a.ak];
      for (int64_t j = c; j < N; ++j) C[r * ldc + j] += x * B[k * ldb + j];
    }
}

// C (M x N, row stride ldc) += A (M x K, strides a) * B (K x N, row stride ldb).
template <class T>
void gemm_acc(const T* A, Strides a, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t M, int64_t K, int64_t N) {
  int64_t r = 0;
  if constexpr (kVecs > 2)  // a narrow C (head_dim columns): twice the rows fit in 32 registers
    if (N <= 2 * kWidth<T>)
      for (; r + 2 * kRows <= M; r += 2 * kRows)
        tile_row<T, 2 * kRows>(A + r * a.ar, a, B, ldb, C + r * ldc, ldc, K, N);
  for (; r + kRows <= M; r += kRows) tile_row<T, kRows>(A + r * a.ar, a, B, ldb, C + r * ldc, ldc, K, N);
  for (; r < M; ++r) tile_row<T, 1>(A + r * a.ar, a, B, ldb, C + r * ldc, ldc, K, N);
}
template <class T>  // A stored (M x K), row stride lda
void gemm_acc(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t M, int64_t K, int64_t N) {
  gemm_acc(A, Strides{lda, 1}, B, ldb, C, ldc, M, K, N);
}
template <class T>  // A^T where A is stored (K x M), row stride lda
void gemm_acc_t(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t M, int64_t K, int64_t N) {
  gemm_acc(A, Strides{1, lda}, B, ldb, C, ldc, M, K, N);
}

// exp of one vector of floats: x = k ln2 + r with |r| <= ln2 / 2, exp(x) =
// 2^k exp(r), exp(r) by Cephes' minimax polynomial (about 1 ulp).  Below -87
// (where exp is under float's smallest normal, -inf from the causal mask
// included) the result is 0.
inline V<float> exp_vec(V<float> x) {
  using VF = V<float>;
  using VI = Vec<float>::bits;
  const VF lo = splat(-87.0f), hi = splat(88.0f);
  const VF xc = x < lo ? lo : (x > hi ? hi : x);
  const VF magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const VF t = xc * splat(1.44269504088896341f) + magic;
  const VF k = t - magic;
  const VI ki = (VI)t - (VI)magic;  // round(x / ln2) as an integer
  VF r = xc - k * splat(0.693359375f);
  r = r - k * splat(-2.12194440e-4f);
  VF p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const VF scale = (VF)((ki + 127) << 23);  // 2^k
  return x < lo ? splat(0.0f) : p * scale;
}

// x[c] = exp(x[c] - shift) for c < n; x holds room for whole vectors.
inline void exp_shifted(float* x, int64_t n, float shift) {
  constexpr int64_t W = kWidth<float>;
  for (int64_t c = 0; c < n; c += W) store(x + c, exp_vec(load(x + c) - splat(shift)));
}
inline void exp_shifted(double* x, int64_t n, double shift) {  // f64: the library's exp
  for (int64_t c = 0; c < n; ++c) x[c] = std::exp(x[c] - shift);
}

inline float exp_one(float x) { return exp_vec(splat(x))[0]; }
inline double exp_one(double x) { return std::exp(x); }

}  // namespace volt::cpu::attention_tiles
