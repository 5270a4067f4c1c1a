// matmul and linear on the CPU: register-tiled kernels chosen at run time for
// the CPU's instruction set (tensor/cpu/gemm.h), threaded over volt's pool
// (tensor/cpu/threads.h).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/tensor.h>

namespace volt {

namespace {

template <class T>
T store_value(T acc, T bias, bool relu) {
  const T v = acc + bias;
  return relu ? (v <= T(0) ? T(0) : v) : v;  // relu(NaN) = NaN
}

// What the kernels do not do themselves, on each finished block of C: a bias
// per row (+ the ReLU after it), then the caller's epilogue.
template <class T>
void finish_block(void* ctx, T* c, int64_t ldc, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const auto& st = *static_cast<const cpu::BasicGemmStore<T>*>(ctx);
  if (st.bias_per_row && st.bias)
    for (int64_t r = 0; r < rows; ++r) {
      T* cr = c + r * ldc;
      const T bi = st.bias[i0 + r];
      for (int64_t j = 0; j < cols; ++j) cr[j] = store_value(cr[j], bi, st.relu);
    }
  if (st.epilogue.fn) st.epilogue.fn(st.epilogue.ctx, c, ldc, i0, j0, rows, cols);
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
// its panels are a few MB (see packed_matmul); then done on each work item's
// block of C, told its place (i_base + i, j_base + j) in the whole product.
template <class T>
void packed_block(const cpu::GemmKernels<T>& ker, const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs,
                  const T* b, int64_t n, int64_t brs, int64_t bcs, T* c, int64_t ldc, const T* bias, bool relu,
                  const cpu::BlockHook<T>& done, int64_t i_base, int64_t j_base) {
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
      if (last && done.fn) {
        const int64_t i = i0 * MR, j = j0 * NR;
        done.fn(done.ctx, c + i * ldc + j, ldc, i_base + i, j_base + j, std::min(m, (i0 + tr) * MR) - i,
                std::min(n, (j0 + tc) * NR) - j);
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
                   const T* b, int64_t n, int64_t brs, int64_t bcs, T* c, int64_t ldc, const T* bias, bool relu,
                   const cpu::BlockHook<T>& done) {
  for (int64_t j = 0; j < n; j += kPackChunk)
    for (int64_t i = 0; i < m; i += kPackChunk)
      packed_block<T>(ker, a + i * ars, std::min(kPackChunk, m - i), k, ars, acs, b + j * bcs,
                      std::min(kPackChunk, n - j), brs, bcs, c + i * ldc + j, ldc, bias ? bias + j : nullptr, relu,
                      done, i, j);
}

// C (m, n; row stride ldc) = A (m, k) B (k, n), A and B with any strides, then
// the store (gemm.h).  The kernels add a bias per column and apply the ReLU
// as they store each tile; a bias per row and the epilogue are finish_block's,
// on each block of C a kernel has finished.
template <class T>
void matmul_2d(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n, int64_t brs,
               int64_t bcs, T* out, int64_t ldc, const cpu::BasicGemmStore<T>& store = {}) {
  if (m == 0 || n == 0) return;
  const cpu::GemmKernels<T>& ker = kernels<T>();
  const bool row_bias = store.bias_per_row && store.bias;
  const T* col_bias = row_bias ? nullptr : store.bias;
  const bool relu = store.relu && !row_bias;  // after a row bias: finish_block's
  cpu::BlockHook<T> done;
  if (row_bias || store.epilogue.fn) {
    done.fn = finish_block<T>;
    done.ctx = const_cast<cpu::BasicGemmStore<T>*>(&store);
  }
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) out[i * ldc + j] = store_value(T(0), col_bias ? col_bias[j] : T(0), relu);
    if (done.fn) done.fn(done.ctx, out, ldc, 0, 0, m, n);
    return;
  }
  if (ker.skinny(a, m, k, ars, acs, b, n, brs, bcs, out, ldc, col_bias, relu, done)) return;
  packed_matmul<T>(ker, a, m, k, ars, acs, b, n, brs, bcs, out, ldc, col_bias, relu, done);
}

template <class T>
void matmul_typed(const Tensor& a0, const Tensor& b0, Tensor& out) {
  const cpu::BatchedMatmul bm(a0, b0, out);
  T* o = static_cast<T*>(out.raw_data());
  const T* pa = static_cast<const T*>(bm.a.raw_data());
  const T* pb = static_cast<const T*>(bm.b.raw_data());
  for (int64_t i = 0; i < bm.count(); ++i) {
    const auto [oa, ob] = bm.offsets(i);
    matmul_2d<T>(pa + oa, bm.m, bm.k, bm.a.stride(-2), bm.a.stride(-1), pb + ob, bm.n, bm.b.stride(-2),
                 bm.b.stride(-1), o + i * bm.m * bm.n, bm.n);
  }
}

template <class T>
void linear_typed(const Tensor& x0, const Tensor& w, const Tensor* bias, Tensor& out, bool relu) {
  Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  T* o = static_cast<T*>(out.raw_data());
  Tensor b = bias ? bias->contiguous() : Tensor();
  // out = x @ w^T + bias: w^T has strides (w.stride(1), w.stride(0)).
  cpu::BasicGemmStore<T> store;
  store.bias = bias ? static_cast<const T*>(b.raw_data()) : nullptr;
  store.relu = relu;
  matmul_2d<T>(static_cast<const T*>(x.raw_data()), m, k, x.stride(0), x.stride(1),
               static_cast<const T*>(w.raw_data()), n, w.stride(1), w.stride(0), o, n, store);
}

}  // namespace

namespace cpu {

BatchedMatmul::BatchedMatmul(const Tensor& a0, const Tensor& b0, const Tensor& out) : a(a0), b(b0) {
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(1);
  m = a.size(-2), k = a.size(-1), n = b.size(-1);
  batch.assign(out.sizes().begin(), out.sizes().end() - (a1 ? 0 : 1) - (b1 ? 0 : 1));
  Shape ash = batch, bsh = batch;
  ash.push_back(m), ash.push_back(k);
  bsh.push_back(k), bsh.push_back(n);
  a = a.expand(ash);
  b = b.expand(bsh);
}

std::pair<int64_t, int64_t> BatchedMatmul::offsets(int64_t i) const {
  int64_t oa = 0, ob = 0;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    const int64_t idx = i % batch[d];
    i /= batch[d];
    oa += idx * a.strides()[d];
    ob += idx * b.strides()[d];
  }
  return {oa, ob};
}

void gemm_f32(const float* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const float* b, int64_t n,
              int64_t brs, int64_t bcs, float* c, int64_t ldc, const GemmStore& store) {
  VOLT_CHECK(m >= 0 && k >= 0 && n >= 0 && ldc >= n, "gemm_f32", "expects sizes >= 0 and a row stride ldc >= n");
  matmul_2d<float>(a, m, k, ars, acs, b, n, brs, bcs, c, ldc, store);
}

void gemm_f64(const double* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const double* b, int64_t n,
              int64_t brs, int64_t bcs, double* c, int64_t ldc, const BasicGemmStore<double>& store) {
  VOLT_CHECK(m >= 0 && k >= 0 && n >= 0 && ldc >= n, "gemm_f64", "expects sizes >= 0 and a row stride ldc >= n");
  matmul_2d<double>(a, m, k, ars, acs, b, n, brs, bcs, c, ldc, store);
}

}  // namespace cpu

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
