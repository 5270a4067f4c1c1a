// matmul and linear on the CPU with Eigen's GEMM (threaded with OpenMP).
#include <Eigen/Core>

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

template <class T>
void matmul_2d(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
               int64_t brs, int64_t bcs, T* out) {
  Eigen::Map<RowMat<T>> c(out, m, n);
  if (k == 0) {
    c.setZero();
    return;
  }
  with_matrix(a, m, k, ars, acs, [&](const auto& A) {
    with_matrix(b, k, n, brs, bcs, [&](const auto& B) { c.noalias() = A * B; });
  });
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
  // out = x @ w^T: w^T has strides (w.stride(1), w.stride(0)).
  matmul_2d<T>(static_cast<const T*>(x.raw_data()), m, k, x.stride(0), x.stride(1),
               static_cast<const T*>(w.raw_data()), n, w.stride(1), w.stride(0), o);
  if (bias) {
    Tensor b = bias->contiguous();
    Eigen::Map<RowMat<T>> c(o, m, n);
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(static_cast<const T*>(b.raw_data()), n);
    c.rowwise() += bv;
  }
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
