// linear -> ReLU -> dropout on the CPU as one GEMM: the bias and the ReLU in the
// kernels' store, the dropout mask in the GEMM's epilogue (tensor/cpu/gemm.h),
// each block of the output masked while it is still in cache.
//
// The mask is the eager `dropout` op's, draw for draw: element e of the output
// (row-major) is kept when U_e < 1 - p, U_e the uniform [0, 1) of counter
// offset + e of the Philox draw (seed, offset) in the output's dtype, and a kept
// value is scaled by 1/(1-p) as that op's two multiplications do.
#include <algorithm>
#include <type_traits>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/half.h>
#include <volt/tensor/random.h>
#include <volt/tensor/tensor.h>
// The Philox text (as random.cpp and the CPU backend compile it), inlined so
// that a row of the block draws as one vector loop.
#include <volt/tensor/philox.inc>

namespace volt {

namespace {

template <class T>
struct DropoutStore {
  int64_t n;     // the output's row length: element (i, j) is draw i n + j
  uint64_t seed, offset;
  T keep;        // 1 - p in T, as `lt(uniform, 1 - p)` compares
  T scale;       // 1 / (1 - p) in T (0 when p = 1), as `mul(., 1 / (1 - p))` scales
};

template <class T>
void dropout_block(void* ctx, T* c, int64_t ldc, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const DropoutStore<T>& d = *static_cast<const DropoutStore<T>*>(ctx);
  constexpr int64_t kChunk = 64;
  T u[kChunk];
  for (int64_t r = 0; r < rows; ++r) {
    T* cr = c + r * ldc;
    const uint64_t first = uint64_t((i0 + r) * d.n + j0);
    for (int64_t q0 = 0; q0 < cols; q0 += kChunk) {
      const int64_t len = std::min(kChunk, cols - q0);
#pragma omp simd
      for (int64_t q = 0; q < len; ++q) {
        if constexpr (std::is_same_v<T, float>)
          u[q] = volt_uniform_range_f32(d.seed, d.offset, first + uint64_t(q0 + q), 0.0f, 1.0f);
        else
          u[q] = volt_uniform_range_f64(d.seed, d.offset, first + uint64_t(q0 + q), 0.0, 1.0);
      }
      for (int64_t q = 0; q < len; ++q) {
        const T m = u[q] < d.keep ? T(1) : T(0);
        cr[q0 + q] = (cr[q0 + q] * m) * d.scale;
      }
    }
  }
}

template <class T>
void linear_relu_dropout_typed(const Tensor& x0, const Tensor& w, const Tensor* bias, double p, PhiloxState rng,
                               Tensor& out) {
  const Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const Tensor b = bias ? bias->contiguous() : Tensor();
  const double keep = 1.0 - p;
  DropoutStore<T> drop{n, rng.seed, rng.offset, T(keep), T(keep > 0 ? 1.0 / keep : 0.0)};
  cpu::BasicGemmStore<T> store;
  store.bias = bias ? static_cast<const T*>(b.raw_data()) : nullptr;
  store.relu = true;
  if (p > 0) store.epilogue = {dropout_block<T>, &drop};
  // out = x @ w^T: w^T has strides (w.stride(1), w.stride(0)).
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* wp = static_cast<const T*>(w.raw_data());
  T* o = static_cast<T*>(out.raw_data());
  if constexpr (std::is_same_v<T, float>)
    cpu::gemm_f32(xp, m, k, x.stride(0), x.stride(1), wp, n, w.stride(1), w.stride(0), o, n, store);
  else
    cpu::gemm_f64(xp, m, k, x.stride(0), x.stride(1), wp, n, w.stride(1), w.stride(0), o, n, store);
}

// gz = g / (1 - p) where y > 0, else 0 (g alone when p = 0): the chain's
// dropout and relu gradients, the mask read off the output.
template <class T>
void relu_dropout_backward_typed(const Tensor& y, const Tensor& g, double p, Tensor& out) {
  const T* yp = static_cast<const T*>(y.raw_data());
  const T* gp = static_cast<const T*>(g.raw_data());
  T* o = static_cast<T*>(out.raw_data());
  const T scale = T(p < 1 ? 1.0 / (1.0 - p) : 0.0);
  const bool scaled = p > 0;
  cpu::parallel_for(y.numel(), int64_t(1) << 15, [&](int64_t b, int64_t e) {
    if (scaled) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) o[i] = yp[i] > T(0) ? gp[i] * scale : T(0);
    } else {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) o[i] = yp[i] > T(0) ? gp[i] : T(0);
    }
  });
}

// relu then dropout of a bf16 z, as the chain computes them on bf16 (each
// widened to f32 and rounded once): bf16((relu(z) * m) * scale), m element
// e's keep of draw e in f32, as dropout_block draws.  z, out: (n), contiguous.
void relu_dropout_bf16_typed(const Tensor& z, double p, PhiloxState rng, Tensor& out) {
  const uint16_t* zp = static_cast<const uint16_t*>(z.raw_data());
  uint16_t* o = static_cast<uint16_t*>(out.raw_data());
  const double keep_d = 1.0 - p;
  const float keep = float(keep_d), scale = float(keep_d > 0 ? 1.0 / keep_d : 0.0);
  const bool drops = p > 0;
  cpu::parallel_for(z.numel(), int64_t(1) << 14, [&](int64_t b, int64_t e) {
    constexpr int64_t kChunk = 64;
    float u[kChunk];
    for (int64_t i0 = b; i0 < e; i0 += kChunk) {
      const int64_t len = std::min(kChunk, e - i0);
      if (drops) {
#pragma omp simd
        for (int64_t q = 0; q < len; ++q)
          u[q] = volt_uniform_range_f32(rng.seed, rng.offset, uint64_t(i0 + q), 0.0f, 1.0f);
      }
      for (int64_t q = 0; q < len; ++q) {
        const float v = volt_bf16_to_f32(zp[i0 + q]);
        float r = v <= 0.0f ? 0.0f : v;  // where(z <= 0, 0, z): a NaN stays NaN
        if (drops) r = (r * (u[q] < keep ? 1.0f : 0.0f)) * scale;
        o[i0 + q] = volt_f32_to_bf16(r);
      }
    }
  });
}

// Its gradient on bf16: bf16(g * scale) where y > 0 (g where p = 0), else 0.
void relu_dropout_backward_bf16(const Tensor& y, const Tensor& g, double p, Tensor& out) {
  const uint16_t* yp = static_cast<const uint16_t*>(y.raw_data());
  const uint16_t* gp = static_cast<const uint16_t*>(g.raw_data());
  uint16_t* o = static_cast<uint16_t*>(out.raw_data());
  const float scale = float(p < 1 ? 1.0 / (1.0 - p) : 0.0);
  const bool scaled = p > 0;
  cpu::parallel_for(y.numel(), int64_t(1) << 15, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const bool on = volt_bf16_to_f32(yp[i]) > 0.0f;
      o[i] = !on ? uint16_t(0) : scaled ? volt_f32_to_bf16(volt_bf16_to_f32(gp[i]) * scale) : gp[i];
    }
  });
}

}  // namespace

void cpu_relu_dropout_bf16(const Tensor& z, double p, PhiloxState rng, Tensor& out) {
  const char* op = "relu_dropout";
  VOLT_CHECK(z.dtype() == DType::bf16 && out.dtype() == DType::bf16 && z.is_contiguous() && out.is_contiguous() &&
                 z.numel() == out.numel(),
             op, "expects contiguous bf16 input and output of one size, got " << z.meta_str() << " and "
                                                                              << out.meta_str());
  VOLT_CHECK(p >= 0 && p <= 1, op, "expects a dropout probability in [0, 1], got " << p);
  relu_dropout_bf16_typed(z, p, rng, out);
}

void cpu_relu_dropout_backward(const Tensor& y, const Tensor& g, double p, Tensor& out) {
  const char* op = "relu_dropout_backward";
  VOLT_CHECK((y.dtype() == DType::f32 || y.dtype() == DType::f64 || y.dtype() == DType::bf16) &&
                 g.dtype() == y.dtype() && out.dtype() == y.dtype(),
             op, "expects f32, f64 or bf16 output, gradient and result of one dtype");
  VOLT_CHECK(y.is_contiguous() && g.is_contiguous() && out.is_contiguous() && g.numel() == y.numel() &&
                 out.numel() == y.numel(),
             op, "expects contiguous tensors of one size");
  VOLT_CHECK(p >= 0 && p <= 1, op, "expects a dropout probability in [0, 1], got " << p);
  if (y.dtype() == DType::f64) relu_dropout_backward_typed<double>(y, g, p, out);
  else if (y.dtype() == DType::bf16) relu_dropout_backward_bf16(y, g, p, out);
  else relu_dropout_backward_typed<float>(y, g, p, out);
}

void cpu_linear_relu_dropout(const Tensor& x, const Tensor& w, const Tensor* bias, double p, PhiloxState rng,
                             Tensor& out) {
  const char* op = "linear_relu_dropout";
  VOLT_CHECK(x.dtype() == w.dtype() && (x.dtype() == DType::f32 || x.dtype() == DType::f64), op,
             "expects f32 or f64 x and weight of one dtype");
  VOLT_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), op, "expects x (*, in) and weight (out, in)");
  VOLT_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == w.size(0) && bias->dtype() == x.dtype()), op,
             "expects a bias (out) of the weight's dtype");
  VOLT_CHECK(p >= 0 && p <= 1, op, "expects a dropout probability in [0, 1], got " << p);
  VOLT_CHECK(out.is_contiguous() && out.numel() == x.numel() / std::max<int64_t>(1, x.size(-1)) * w.size(0) &&
                 out.dtype() == x.dtype(),
             op, "expects a contiguous output (*, out) of x's dtype");
  if (x.dtype() == DType::f64) linear_relu_dropout_typed<double>(x, w, bias, p, rng, out);
  else linear_relu_dropout_typed<float>(x, w, bias, p, rng, out);
}

}  // namespace volt
