// matmul and linear on the CPU: small register-tiled kernels for skinny and
// large products (threaded with OpenMP), Eigen's GEMM for the rest.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/tensor.h"

namespace volt {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using OStride = Eigen::OuterStride<Eigen::Dynamic>;

// Calls f with an Eigen map of the (rows, cols) matrix at p with element strides
// (rs, cs): row-major if cs == 1, column-major if rs == 1, else a packed copy.
template <class T, class F>
void with_matrix(const T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, F f) {
  if ((cs == 1 || cols == 1) && rs >= cols && rs > 0) {
    Eigen::Map<const RowMat<T>, 0, OStride> m(p, rows, cols, OStride(rs));
    return f(m);
  }
  if ((rs == 1 || rows == 1) && cs >= rows && cs > 0) {
    Eigen::Map<const ColMat<T>, 0, OStride> m(p, rows, cols, OStride(cs));
    return f(m);
  }
  RowMat<T> packed(rows, cols);  // broadcast or oddly strided: pack once
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) packed(i, j) = p[i * rs + j * cs];
  return f(packed);
}

// ---- skinny products ----
// With few rows (a batch of 8) Eigen spends as long packing the large operand
// into its blocked layout as multiplying, on every call.  These kernels read the
// large operand once, in place, and keep a small tile of C in registers.  Each
// element of C is one accumulation in a fixed order, so results do not depend
// on the number of threads.  std::fma is an explicit fused multiply-add (the
// build forbids implicit contraction); it vectorises like a multiply.

constexpr int64_t kSkinny = 16;  // m (or k, for the rank-k update) up to this
constexpr int kLanes = 16;       // elements per vector register tile (one 64-byte line of f32)

// Above this many multiply-adds a skinny product splits its columns over threads.
constexpr int64_t kSkinnyParallelWork = int64_t(1) << 21;

// C[0:MR, 0:COLS] = A[0:MR, 0:k] B[0:k, 0:COLS] (+ bias) where B rows are
// contiguous (bcs == 1); A may have any strides.  COLS is kLanes except for the
// last, partial tile of a row, which never reads past the row's end.
template <class T, int MR, bool Full>
void tile_b_rows(const T* a, int64_t ars, int64_t acs, const T* b, int64_t brs, int64_t k, T* c,
                 int64_t ldc, int64_t partial_cols, const T* bias) {
  const int64_t cols = Full ? kLanes : partial_cols;
  T acc[MR][kLanes] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const T* brow = b + kk * brs;
    for (int i = 0; i < MR; ++i) {
      const T aik = a[i * ars + kk * acs];
      if constexpr (Full) {
#pragma omp simd
        for (int j = 0; j < kLanes; ++j) acc[i][j] = std::fma(aik, brow[j], acc[i][j]);
      } else {
        for (int64_t j = 0; j < cols; ++j) acc[i][j] = std::fma(aik, brow[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = bias ? acc[i][j] + bias[j] : acc[i][j];
}

// C[0:MR, 0:NC] = A[0:MR, 0:k] B[0:k, 0:NC] where A rows and B columns are
// contiguous (acs == 1, brs == 1): MR x NC dot products, kLanes lanes wide, summed
// across lanes at the end.  This is linear's x W^T with W (out, in) row-major.
template <class T, int MR, int NC>
void tile_dots(const T* a, int64_t ars, const T* b, int64_t bcs, int64_t k, T* c, int64_t ldc,
               const T* bias) {
  T acc[MR][NC][kLanes] = {};
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NC; ++j) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l)
          acc[i][j][l] = std::fma(a[i * ars + kk + l], b[j * bcs + kk + l], acc[i][j][l]);
      }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NC; ++j) {
      T s = 0;
      for (int l = 0; l < kLanes; ++l) s += acc[i][j][l];
      for (int64_t r = kk; r < k; ++r) s = std::fma(a[i * ars + r], b[j * bcs + r], s);
      c[i * ldc + j] = bias ? s + bias[j] : s;
    }
}

// Calls f.template operator()<R>() with R = r, for r in 1..8.
template <class F>
void with_rows(int64_t r, F&& f) {
  switch (r) {
    case 1: return f.template operator()<1>();
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 4: return f.template operator()<4>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 7: return f.template operator()<7>();
    default: return f.template operator()<8>();
  }
}

// C (m, n) row-major = A (m, k) B (k, n) (+ bias (n)) when one of the kernels above
// fits; returns false to leave the product to Eigen.
template <class T>
bool skinny_matmul(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
                   int64_t brs, int64_t bcs, T* c, const T* bias) {
  const bool parallel = m * n * k >= kSkinnyParallelWork;
  (void)parallel;
  if (m <= kSkinny && acs == 1 && brs == 1 && bcs >= k) {
    // Dot products: 4 rows x 4 columns of C per tile.
    constexpr int MR = 4, NC = 4;
    const int64_t col_tiles = (n + NC - 1) / NC;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < col_tiles; ++t) {
      const int64_t j = t * NC;
      for (int64_t i = 0; i < m; i += MR) {
        const T* ai = a + i * ars;
        T* ci = c + i * n + j;
        const T* bj = b + j * bcs;
        const T* bias_j = bias ? bias + j : nullptr;
        const int64_t rows = std::min<int64_t>(MR, m - i);
        if (n - j >= NC) {
          with_rows(rows, [&]<int R>() {
            if constexpr (R <= MR) tile_dots<T, R, NC>(ai, ars, bj, bcs, k, ci, n, bias_j);
          });
        } else {
          for (int64_t jj = 0; jj < n - j; ++jj)
            with_rows(rows, [&]<int R>() {
              if constexpr (R <= MR)
                tile_dots<T, R, 1>(ai, ars, bj + jj * bcs, bcs, k, ci + jj, n, bias_j ? bias_j + jj : nullptr);
            });
        }
      }
    }
    return true;
  }
  if ((m <= kSkinny || k <= kSkinny) && bcs == 1 && brs >= n) {
    // Rank-k updates of 8 rows x kLanes columns: B is streamed row by row.
    constexpr int MR = 8;
    const int64_t col_tiles = (n + kLanes - 1) / kLanes;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < col_tiles; ++t) {
      const int64_t j = t * kLanes, cols = std::min<int64_t>(kLanes, n - j);
      for (int64_t i = 0; i < m; i += MR)
        with_rows(std::min<int64_t>(MR, m - i), [&]<int R>() {
          const T* bias_j = bias ? bias + j : nullptr;
          if (cols == kLanes)
            tile_b_rows<T, R, true>(a + i * ars, ars, acs, b + j, brs, k, c + i * n + j, n, cols, bias_j);
          else
            tile_b_rows<T, R, false>(a + i * ars, ars, acs, b + j, brs, k, c + i * n + j, n, cols, bias_j);
        });
    }
    return true;
  }
  return false;
}

// ---- packed products ----
// Larger products (a batch of 64 and up, and the weight gradients there) copy A
// into panels of kPackRows rows and B into panels of kPackCols<T> columns, each
// laid out k-major, so that the register tile below reads both operands
// sequentially from the cache and does one load of B per kPackRows multiply-adds.
// Copying costs (m + n) k moves against m n k multiply-adds.  On the seed
// model's GEMMs this runs 1.07-1.29x as fast as Eigen's (which packs too).
//
// Each element of C is one chain of fused multiply-adds over k in ascending
// order (a k-block after the first starts from the partial sums left in C, and
// the bias is added last), so C equals the naive loop c = fma(a, b, c) bit for
// bit, whatever the number of threads.

constexpr int kPackRows = 8;
template <class T>
constexpr int kPackCols = 128 / sizeof(T);  // two 64-byte vectors: 32 floats, 16 doubles
constexpr int64_t kPackDepth = 1024;        // the most of k one block packs

// C[0:rows, 0:cols] (= or +=) Ap Bp over kc, for one packed row panel of A and
// one packed column panel of B; Full tiles (rows == kPackRows, cols ==
// kPackCols) have compile-time bounds so that the accumulators stay in registers.
template <class T, bool Full>
void packed_tile(const T* ap, const T* bp, int64_t kc, T* c, int64_t ldc, int rows, int cols, bool accumulate,
                 const T* bias) {
  constexpr int MR = kPackRows, NR = kPackCols<T>;
  if constexpr (Full) rows = MR, cols = NR;
  T acc[MR][NR] = {};
  if (accumulate)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) acc[i][j] = c[i * ldc + j];
  for (int64_t kk = 0; kk < kc; ++kk) {
    const T* a = ap + kk * MR;
    const T* b = bp + kk * NR;
    for (int i = 0; i < MR; ++i) {
      const T aik = a[i];
#pragma omp simd
      for (int j = 0; j < NR; ++j) acc[i][j] = std::fma(aik, b[j], acc[i][j]);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) c[i * ldc + j] = bias ? acc[i][j] + bias[j] : acc[i][j];
}

// Copies the (rows, kc) block of X at x (element strides rs, cs) into panels of
// R rows, k-major: panel q holds rows q R .. q R + R - 1, element (r, kk) at
// q R kc + kk R + r; rows past the end are zeros.  Used for A (R = kPackRows)
// and, with B transposed, for B (R = kPackCols).
template <class T, int R>
void pack_panel(const T* x, int64_t rows, int64_t kc, int64_t rs, int64_t cs, int64_t q, T* dst) {
  T* d = dst + q * R * kc;
  const int64_t r0 = q * R, live = std::min<int64_t>(R, rows - r0);
  if (cs == 1) {
    // Rows contiguous: a transposition, done in strips of 16 along k so that
    // the strip being written (16 x R elements) stays in L1.
    constexpr int64_t kStrip = 16;
    for (int64_t k0 = 0; k0 < kc; k0 += kStrip) {
      const int64_t k1 = std::min(kc, k0 + kStrip);
      for (int64_t r = 0; r < live; ++r)
        for (int64_t kk = k0; kk < k1; ++kk) d[kk * R + r] = x[(r0 + r) * rs + kk];
    }
  } else {
    for (int64_t kk = 0; kk < kc; ++kk)
      for (int64_t r = 0; r < live; ++r) d[kk * R + r] = x[(r0 + r) * rs + kk * cs];
  }
  for (int64_t kk = 0; kk < kc; ++kk)
    for (int64_t r = live; r < R; ++r) d[kk * R + r] = T(0);
}

// C (m, n), row stride ldc, = A B (+ bias) for a block small enough that its
// panels are a few MB (see packed_matmul).
template <class T>
void packed_block(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
                  int64_t brs, int64_t bcs, T* c, int64_t ldc, const T* bias) {
  constexpr int MR = kPackRows, NR = kPackCols<T>;
  const int64_t mp = (m + MR - 1) / MR, np = (n + NR - 1) / NR;
  const int64_t blocks = (k + kPackDepth - 1) / kPackDepth, kc_max = (k + blocks - 1) / blocks;
  // The panels live for the whole call; kept per calling thread so that steady
  // training reuses them instead of allocating megabytes per product.
  static thread_local std::vector<T> a_panels, b_panels;
  if (a_panels.size() < size_t(mp * MR * kc_max)) a_panels.resize(size_t(mp * MR * kc_max));
  if (b_panels.size() < size_t(np * NR * kc_max)) b_panels.resize(size_t(np * NR * kc_max));
  T* ap = a_panels.data();
  T* bp = b_panels.data();

  const bool parallel = m * n * k >= kSkinnyParallelWork;
  int threads = 1;
#ifdef _OPENMP
  if (parallel) threads = omp_get_max_threads();
#endif
  // Work items of up to 12 row panels x 8 column panels (a 96 x 256 block of C
  // for floats); fewer columns per item until every thread has about 4.
  const int64_t tr = std::min<int64_t>(12, mp);
  int64_t tc = 8;
  while (tc > 1 && ((mp + tr - 1) / tr) * ((np + tc - 1) / tc) < 4 * threads) tc /= 2;
  const int64_t items_r = (mp + tr - 1) / tr, items = items_r * ((np + tc - 1) / tc);

  for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - p0);
    const bool accumulate = p0 > 0;
    const T* bias_now = p0 + kc == k ? bias : nullptr;
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static) nowait
      for (int64_t q = 0; q < mp; ++q) pack_panel<T, MR>(a + p0 * acs, m, kc, ars, acs, q, ap);
      // B's columns are the rows of B^T: (n, kc) with strides (bcs, brs).
#pragma omp for schedule(static)
      for (int64_t q = 0; q < np; ++q) pack_panel<T, NR>(b + p0 * brs, n, kc, bcs, brs, q, bp);
#pragma omp for schedule(dynamic)
      for (int64_t item = 0; item < items; ++item) {
        const int64_t i0 = (item % items_r) * tr, j0 = (item / items_r) * tc;
        for (int64_t jq = j0; jq < std::min(np, j0 + tc); ++jq)
          for (int64_t iq = i0; iq < std::min(mp, i0 + tr); ++iq) {
            const int64_t i = iq * MR, j = jq * NR;
            const int rows = int(std::min<int64_t>(MR, m - i)), cols = int(std::min<int64_t>(NR, n - j));
            const T* a_panel = ap + iq * MR * kc;
            const T* b_panel = bp + jq * NR * kc;
            const T* bias_j = bias_now ? bias_now + j : nullptr;
            if (rows == MR && cols == NR)
              packed_tile<T, true>(a_panel, b_panel, kc, c + i * ldc + j, ldc, rows, cols, accumulate, bias_j);
            else
              packed_tile<T, false>(a_panel, b_panel, kc, c + i * ldc + j, ldc, rows, cols, accumulate, bias_j);
          }
      }
    }
  }
}

// Products larger than kPackChunk x kPackChunk run block by block, so that the
// panels stay bounded (at most 2 x kPackChunk x kPackDepth elements) whatever
// the size; each block still sums over the whole of k in order.
constexpr int64_t kPackChunk = 4096;

template <class T>
void packed_matmul(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
                   int64_t brs, int64_t bcs, T* c, const T* bias) {
  for (int64_t j = 0; j < n; j += kPackChunk)
    for (int64_t i = 0; i < m; i += kPackChunk)
      packed_block<T>(a + i * ars, std::min(kPackChunk, m - i), k, ars, acs, b + j * bcs,
                      std::min(kPackChunk, n - j), brs, bcs, c + i * n + j, n, bias ? bias + j : nullptr);
}

// Whether the packed kernels suit a product: long enough in m and k (shorter
// ones are the skinny kernels' or Eigen's) and at least half a column panel wide.
template <class T>
bool wants_packed(int64_t m, int64_t k, int64_t n) {
  return m > kSkinny && k > kSkinny && n >= kPackCols<T> / 2;
}

// C (m, n) row-major = A (m, k) B (k, n) (+ bias (n)), A and B with any strides.
template <class T>
void matmul_2d(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
               int64_t brs, int64_t bcs, T* out, const T* bias = nullptr) {
  Eigen::Map<RowMat<T>> c(out, m, n);
  if (k == 0) {
    c.setZero();
  } else if (skinny_matmul<T>(a, m, k, ars, acs, b, n, brs, bcs, out, bias)) {
    return;
  } else if (wants_packed<T>(m, k, n)) {
    return packed_matmul<T>(a, m, k, ars, acs, b, n, brs, bcs, out, bias);
  } else {
    with_matrix(a, m, k, ars, acs, [&](const auto& A) {
      with_matrix(b, k, n, brs, bcs, [&](const auto& B) { c.noalias() = A * B; });
    });
  }
  if (bias) {
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(bias, n);
    c.rowwise() += bv;
  }
}

template <class T>
void matmul_typed(const Tensor& a0, const Tensor& b0, Tensor& out) {
  Tensor a = a0, b = b0;
  bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(1);
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape batch(out.sizes().begin(), out.sizes().end() - (a1 ? 0 : 1) - (b1 ? 0 : 1));
  Shape ash = batch, bsh = batch;
  ash.push_back(m), ash.push_back(k);
  bsh.push_back(k), bsh.push_back(n);
  a = a.expand(ash);
  b = b.expand(bsh);
  int64_t nb = shape_numel(batch);
  T* o = static_cast<T*>(out.raw_data());
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  int64_t nd = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * a.strides()[d];
      ob += idx * b.strides()[d];
    }
    matmul_2d<T>(pa + oa, m, k, a.stride(-2), a.stride(-1), pb + ob, n, b.stride(-2), b.stride(-1),
                 o + i * m * n);
  }
}

template <class T>
void linear_typed(const Tensor& x0, const Tensor& w, const Tensor* bias, Tensor& out) {
  Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  T* o = static_cast<T*>(out.raw_data());
  Tensor b = bias ? bias->contiguous() : Tensor();
  // out = x @ w^T + bias: w^T has strides (w.stride(1), w.stride(0)).
  matmul_2d<T>(static_cast<const T*>(x.raw_data()), m, k, x.stride(0), x.stride(1),
               static_cast<const T*>(w.raw_data()), n, w.stride(1), w.stride(0), o,
               bias ? static_cast<const T*>(b.raw_data()) : nullptr);
}

}  // namespace

void cpu_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::f64) matmul_typed<double>(a, b, out);
  else matmul_typed<float>(a, b, out);
}

void cpu_linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  if (x.dtype() == DType::f64) linear_typed<double>(x, w, bias, out);
  else linear_typed<float>(x, w, bias, out);
}

}  // namespace volt
