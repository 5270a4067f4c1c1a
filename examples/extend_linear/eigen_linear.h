// eigen_linear: an operator executor that runs `linear` on the CPU with the
// bias (and, for linear_relu, the ReLU) applied inside the GEMM's pass over
// the output, instead of in passes of their own.
//
//   volt::jit::OperatorExecutor& ex = volt_example::eigen_linear_executor();
//   auto jm = volt::jit::jit(model, {.executors = {ex}});
//   jm(x);  // the trace shows  t0 = eigen_linear(input, _0_weight, _0_bias)
//
// What it claims: `linear` with f32 CPU tensors, a 2-D input and a 1-D bias or
// none (the checker); anything else stays with the built-in executors.  The
// claim happens after the grad pass, so gradients are the built-in linear's
// VJP; only the forward GEMM changes hands.
//
// The kernel (x: (M, K), w: (N, K), b: (N) -> y: (M, N)) has two paths: few
// rows are register-tiled dot products that read w once in place; many rows
// are Eigen's GEMM on column slabs, one per thread, with the bias and ReLU
// applied in the GEMM's own pass over each slab (details below).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen's AVX-512 kernels, GCC 12
#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <volt/jit/executor.h>
#include <volt/tensor/ops.h>

namespace volt_example {

using volt::DType;
using volt::Tensor;
using volt::Value;

// ---- few rows (m <= 16): register-tiled dot products
// With a batch of 8 the work is reading w (2.4 MB for 784 x 784) once; Eigen's
// GEMM would first copy w into its packed layout on every call.  Here a tile of
// R rows of x and NC rows of w is R x NC dot products, each summed in 16 lanes
// that the compiler keeps in vector registers; w is read in place, once.
template <int R, int NC>
inline void dot_tile(const float* x, int64_t k, const float* w, float* y, int64_t ldy, const float* b, bool relu) {
  constexpr int kLanes = 16;
  float acc[R][NC][kLanes] = {};
  int64_t q = 0;
  for (; q + kLanes <= k; q += kLanes)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NC; ++c) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) acc[r][c][l] += x[r * k + q + l] * w[c * k + q + l];
      }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      float s = 0;
      for (int l = 0; l < kLanes; ++l) s += acc[r][c][l];
      for (int64_t t = q; t < k; ++t) s += x[r * k + t] * w[c * k + t];
      if (b) s += b[c];
      y[r * ldy + c] = relu ? std::max(s, 0.0f) : s;
    }
}

template <int NC>
inline void dot_rows(int64_t rows, const float* x, int64_t k, const float* w, float* y, int64_t ldy, const float* b,
                     bool relu) {
  switch (rows) {
    case 1: return dot_tile<1, NC>(x, k, w, y, ldy, b, relu);
    case 2: return dot_tile<2, NC>(x, k, w, y, ldy, b, relu);
    case 3: return dot_tile<3, NC>(x, k, w, y, ldy, b, relu);
    default: return dot_tile<4, NC>(x, k, w, y, ldy, b, relu);
  }
}

// x (m, k), w (n, k), b (n) or null -> y (m, n); contiguous, m small.
inline void skinny_linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* b, float* y,
                          bool relu) {
  constexpr int NC = 4;
  const int64_t groups = (n + NC - 1) / NC;
  // Threads pay off only when there is enough of w to share out.
#pragma omp parallel for schedule(static) if (m * n * k >= (int64_t(1) << 23))
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t j = g * NC;
    for (int64_t i = 0; i < m; i += 4) {
      const int64_t rows = std::min<int64_t>(4, m - i);
      if (n - j >= NC) {
        dot_rows<NC>(rows, x + i * k, k, w + j * k, y + i * n + j, n, b ? b + j : nullptr, relu);
      } else {
        for (int64_t jj = j; jj < n; ++jj)
          dot_rows<1>(rows, x + i * k, k, w + jj * k, y + i * n + jj, n, b ? b + jj : nullptr, relu);
      }
    }
  }
}

// ---- many rows: Eigen's GEMM on column slabs
// y's columns are cut into one slab per thread.  A slab is filled with the
// bias, then Eigen's GEMM accumulates x . w_slab^T into it (a GEMM stores
// C += A B, so the bias costs no pass of its own), then ReLU runs while the
// slab is still in cache.  One parallel region per call: Eigen starts no
// threads of its own inside it, so the threads meet once, not at every block.
inline void slab_linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* b, float* y,
                        bool relu) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<Eigen::Dynamic>;
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const int64_t slab = std::max<int64_t>(16, ((n + threads - 1) / threads + 15) / 16 * 16);
  const int64_t slabs = (n + slab - 1) / slab;
  Eigen::Map<const RowMat> X(x, m, k);
#pragma omp parallel for schedule(static) if (slabs > 1 && m * n * k >= (int64_t(1) << 22))
  for (int64_t s = 0; s < slabs; ++s) {
    const int64_t j0 = s * slab, nj = std::min(slab, n - j0);
    Eigen::Map<const RowMat> W(w + j0 * k, nj, k);              // rows j0 .. j0+nj of w
    Eigen::Map<RowMat, 0, Stride> Y(y + j0, m, nj, Stride(n));  // columns j0 .. j0+nj of y
    if (b) Y.rowwise() = Eigen::Map<const Eigen::RowVectorXf>(b + j0, nj);
    else Y.setZero();
    if (k > 0) Y.noalias() += X * W.transpose();
    if (relu) Y = Y.cwiseMax(0.0f);
  }
}

// y = x w^T + b, and max(y, 0) when `relu`; x (M, K), w (N, K), b (N) or undefined.
// All f32 on the CPU; any layout (non-contiguous operands are copied once).
inline Tensor eigen_linear_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, bool relu) {
  const Tensor x = x0.contiguous(), w = w0.contiguous(), b = b0.defined() ? b0.contiguous() : Tensor();
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  Tensor out = Tensor::empty({m, n}, DType::f32, volt::kCPU);
  if (m == 0 || n == 0) return out;
  const float* pb = b.defined() ? b.data_ptr<float>() : nullptr;
  if (m <= 16) skinny_linear(x.data_ptr<float>(), m, k, w.data_ptr<float>(), n, pb, out.data_ptr<float>(), relu);
  else slab_linear(x.data_ptr<float>(), m, k, w.data_ptr<float>(), n, pb, out.data_ptr<float>(), relu);
  return out;
}

// Whether the kernel can run this call: f32 CPU tensors, x 2-D, w 2-D, b 1-D or absent.
inline bool eigen_linear_accepts(const std::vector<Value>& args) {
  if (args.size() < 2 || args.size() > 3) return false;
  for (const Value& v : args)
    if (!v.is_tensor || !v.tensor.defined() || v.tensor.dtype() != DType::f32 || !v.tensor.device().is_cpu())
      return false;
  if (args[0].tensor.dim() != 2 || args[1].tensor.dim() != 2) return false;
  return args.size() == 2 || args[2].tensor.dim() == 1;
}

struct EigenLinear {
  volt::jit::OperatorExecutor executor{"eigen_linear", "0.1"};
  volt::jit::Symbol linear;       // eigen_linear(x, w[, b]): what the claimed `linear` becomes
  volt::jit::Symbol linear_relu;  // linear_relu(x, w[, b]): for code that asks for the fused ReLU

  EigenLinear() {
    auto bias_of = [](const std::vector<Value>& v) { return v.size() == 3 ? v[2].tensor : Tensor(); };
    // The like-functions give both operators their metadata, their printed
    // decomposition, and a gradient for eager calls that need one.  An operator
    // the executor owns is always run by it, so its implementation falls back
    // to volt's own ops where the kernel does not fit (f64, another device).
    linear = executor.register_operator(
        "eigen_linear",
        {.like = [=](const std::vector<Value>& v) { return std::vector<Tensor>{volt::linear(v[0].tensor, v[1].tensor, bias_of(v))}; },
         .fn = [=](const std::vector<Value>& v) {
           if (!eigen_linear_accepts(v)) return std::vector<Tensor>{volt::linear(v[0].tensor, v[1].tensor, bias_of(v))};
           return std::vector<Tensor>{eigen_linear_forward(v[0].tensor, v[1].tensor, bias_of(v), false)};
         }});
    linear_relu = executor.register_operator(
        "linear_relu",
        {.like = [=](const std::vector<Value>& v) {
           return std::vector<Tensor>{volt::relu(volt::linear(v[0].tensor, v[1].tensor, bias_of(v)))};
         },
         .fn = [=](const std::vector<Value>& v) {
           if (!eigen_linear_accepts(v))
             return std::vector<Tensor>{volt::relu(volt::linear(v[0].tensor, v[1].tensor, bias_of(v)))};
           return std::vector<Tensor>{eigen_linear_forward(v[0].tensor, v[1].tensor, bias_of(v), true)};
         }});
    // The claim: built-in `linear` becomes eigen_linear wherever the kernel fits.
    executor.register_implementation(volt::OpId::linear,
                                     {.checker = eigen_linear_accepts, .execution_transform = [this](const std::vector<Value>& v) {
                                        return linear.call(v);
                                      }});
    volt::jit::register_executor(executor);
  }
};

// The one instance (an executor's name is registered once per process).
inline EigenLinear& eigen_linear() {
  static EigenLinear e;
  return e;
}
inline volt::jit::OperatorExecutor& eigen_linear_executor() { return eigen_linear().executor; }

}  // namespace volt_example

#pragma GCC diagnostic pop
