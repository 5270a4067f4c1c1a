// matmul and linear on the CPU: register-tiled kernels chosen at run time for
// the CPU's instruction set (tensor/cpu_gemm.h), threaded over volt's pool
// (tensor/cpu_threads.h).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <volt/tensor/cpu_gemm.h>
#include <volt/tensor/cpu_threads.h>
#include <volt/tensor/tensor.h>

namespace volt {

namespace {

template <class T>
T epilogue_value(T acc, const T* bias, int64_t j, bool relu) {
  const T v = bias ? acc + bias[j] : acc;
  return relu ? (v > T(0) ? v : T(0)) : v;
}

template <class T>
const cpu::GemmKernels<T>& kernels() {
  if constexpr (std::is_same_v<T, float>) return cpu::gemm_kernels_f32();
  else return cpu::gemm_kernels_f64();
}

// ---- packed products ----
// Products the skinny kernels do not take copy A into panels of mr rows and B into
// panels of nr columns, each laid out k-major, so that the kernel's register
// tile reads both sequentially from the cache.  Copying costs (m + n) k moves
// against m n k multiply-adds.
//
// Each element of C is one chain of fused multiply-adds over k in ascending
// order (a k-block after the first starts from the partial sums left in C; the
// bias and ReLU come last), so C equals the naive loop c = fma(a, b, c) bit for
// bit, whatever the number of threads or the instruction set.

constexpr int64_t kPackDepth = 400;                    // the most of k one block packs
constexpr int64_t kParallelWork = int64_t(1) << 21;    // multiply-adds worth threading

// Copies the (rows, kc) block of X at x (element strides rs, cs) into panels of
// R rows, k-major: panel q holds rows q R .. q R + R - 1, element (r, kk) at
// q R kc + kk R + r; rows past the end are zeros.  Used for A (R = mr) and,
// with B transposed, for B (R = nr).
template <class T>
void pack_panel(const cpu::GemmKernels<T>& ker, const T* x, int64_t rows, int64_t kc, int64_t rs, int64_t cs, int R,
                int64_t q, T* dst) {
  T* d = dst + q * R * kc;
  const int64_t r0 = q * R, live = std::min<int64_t>(R, rows - r0);
  if (cs == 1) return ker.pack_rows(x + r0 * rs, live, kc, rs, R, d);  // a transposition
  // Columns contiguous (training's other layouts): runs of `live` copied.
  if (rs == 1) return ker.pack_cols(x + r0, live, kc, cs, R, d);
  for (int64_t kk = 0; kk < kc; ++kk) {
    T* dk = d + kk * R;
    const T* xk = x + r0 * rs + kk * cs;
    for (int64_t r = 0; r < live; ++r) dk[r] = xk[r * rs];
    for (int64_t r = live; r < R; ++r) dk[r] = T(0);
  }
}

// C (m, n), row stride ldc, = A B (+ bias) (relu) for a block small enough that
// its panels are a few MB (see packed_matmul).
template <class T>
void packed_block(const cpu::GemmKernels<T>& ker, const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs,
                  const T* b, int64_t n, int64_t brs, int64_t bcs, T* c, int64_t ldc, const T* bias, bool relu) {
  const int MR = ker.mr, NR = ker.nr;
  const int64_t mp = (m + MR - 1) / MR, np = (n + NR - 1) / NR;
  const int64_t blocks = (k + kPackDepth - 1) / kPackDepth, kc_max = (k + blocks - 1) / blocks;
  // The panels live for the whole call; kept per calling thread so that steady
  // training reuses them instead of allocating megabytes per product.
  static thread_local std::vector<T> a_panels, b_panels;
  if (a_panels.size() < size_t(mp * MR * kc_max)) a_panels.resize(size_t(mp * MR * kc_max));
  if (b_panels.size() < size_t(np * NR * kc_max)) b_panels.resize(size_t(np * NR * kc_max));
  T* ap = a_panels.data();
  T* bp = b_panels.data();

  const bool parallel = m * n * k >= kParallelWork;
  const int threads = parallel ? cpu::num_threads() : 1;
  // Work items of up to tr row panels x tc column panels; fewer columns per
  // item until every thread has about 4, so that one a descheduled thread holds
  // is a small part of the product.
  const int64_t tr = std::min<int64_t>(std::max(1, 96 / MR), mp);
  int64_t tc = 8;
  while (tc > 1 && ((mp + tr - 1) / tr) * ((np + tc - 1) / tc) < 4 * threads) tc /= 2;
  const int64_t items_r = (mp + tr - 1) / tr, items = items_r * ((np + tc - 1) / tc);

  for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - p0);
    const bool accumulate = p0 > 0, last = p0 + kc == k;
    const T* bias_now = last ? bias : nullptr;
    const bool relu_now = last && relu;
    auto pack = [&](int64_t q) {
      if (q < mp) pack_panel<T>(ker, a + p0 * acs, m, kc, ars, acs, MR, q, ap);
      // B's columns are the rows of B^T: (n, kc) with strides (bcs, brs).
      else pack_panel<T>(ker, b + p0 * brs, n, kc, bcs, brs, NR, q - mp, bp);
    };
    auto compute = [&](int64_t item) {
      const int64_t i0 = (item % items_r) * tr, j0 = (item / items_r) * tc;
      for (int64_t jq = j0; jq < std::min(np, j0 + tc); ++jq)
        for (int64_t iq = i0; iq < std::min(mp, i0 + tr); ++iq) {
          const int64_t i = iq * MR, j = jq * NR;
          const int rows = int(std::min<int64_t>(MR, m - i)), cols = int(std::min<int64_t>(NR, n - j));
          ker.packed_tile(ap + iq * MR * kc, bp + jq * NR * kc, kc, c + i * ldc + j, ldc, rows, cols, accumulate,
                          bias_now ? bias_now + j : nullptr, relu_now);
        }
    };
    if (threads > 1) {
      cpu::parallel_tasks(mp + np, pack);
      cpu::parallel_tasks(items, compute);
    } else {
      for (int64_t q = 0; q < mp + np; ++q) pack(q);
      for (int64_t item = 0; item < items; ++item) compute(item);
    }
  }
}

// Products larger than kPackChunk x kPackChunk run block by block, so that the
// panels stay bounded (at most 2 x kPackChunk x kPackDepth elements) whatever
// the size; each block still sums over the whole of k in order.
constexpr int64_t kPackChunk = 4096;

template <class T>
void packed_matmul(const cpu::GemmKernels<T>& ker, const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs,
                   const T* b, int64_t n, int64_t brs, int64_t bcs, T* c, const T* bias, bool relu) {
  for (int64_t j = 0; j < n; j += kPackChunk)
    for (int64_t i = 0; i < m; i += kPackChunk)
      packed_block<T>(ker, a + i * ars, std::min(kPackChunk, m - i), k, ars, acs, b + j * bcs,
                      std::min(kPackChunk, n - j), brs, bcs, c + i * n + j, n, bias ? bias + j : nullptr, relu);
}

// C (m, n) row-major = A (m, k) B (k, n) (+ bias (n)) (then max(., 0) if relu),
// A and B with any strides.
template <class T>
void matmul_2d(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n, int64_t brs,
               int64_t bcs, T* out, const T* bias = nullptr, bool relu = false) {
  const cpu::GemmKernels<T>& ker = kernels<T>();
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) out[i * n + j] = epilogue_value(T(0), bias, j, relu);
    return;
  }
  if (ker.skinny(a, m, k, ars, acs, b, n, brs, bcs, out, bias, relu)) return;
  packed_matmul<T>(ker, a, m, k, ars, acs, b, n, brs, bcs, out, bias, relu);
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
void linear_typed(const Tensor& x0, const Tensor& w, const Tensor* bias, Tensor& out, bool relu) {
  Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  T* o = static_cast<T*>(out.raw_data());
  Tensor b = bias ? bias->contiguous() : Tensor();
  // out = x @ w^T + bias: w^T has strides (w.stride(1), w.stride(0)).
  matmul_2d<T>(static_cast<const T*>(x.raw_data()), m, k, x.stride(0), x.stride(1),
               static_cast<const T*>(w.raw_data()), n, w.stride(1), w.stride(0), o,
               bias ? static_cast<const T*>(b.raw_data()) : nullptr, relu);
}

}  // namespace

void cpu_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::f64) matmul_typed<double>(a, b, out);
  else matmul_typed<float>(a, b, out);
}

void cpu_linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  if (x.dtype() == DType::f64) linear_typed<double>(x, w, bias, out, false);
  else linear_typed<float>(x, w, bias, out, false);
}

void cpu_linear_relu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  VOLT_CHECK(x.dtype() == w.dtype() && (x.dtype() == DType::f32 || x.dtype() == DType::f64), "linear_relu",
             "expects f32 or f64 x and weight of one dtype");
  VOLT_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), "linear_relu",
             "expects x (*, in) and weight (out, in)");
  VOLT_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == w.size(0) && bias->dtype() == x.dtype()),
             "linear_relu", "expects a bias (out) of the weight's dtype");
  VOLT_CHECK(out.is_contiguous() && out.numel() == x.numel() / std::max<int64_t>(1, x.size(-1)) * w.size(0) &&
                 out.dtype() == x.dtype(),
             "linear_relu", "expects a contiguous output (*, out) of x's dtype");
  if (x.dtype() == DType::f64) linear_typed<double>(x, w, bias, out, true);
  else linear_typed<float>(x, w, bias, out, true);
}

}  // namespace volt
