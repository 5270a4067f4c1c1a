// matmul and linear with cuBLAS.  cuBLAS is column-major: a row-major
// C (m, n) = A (m, k) B (k, n) is the column-major C^T = B^T A^T, so B is
// passed first.  A transposed view (linear's w^T, the grads' x^T) is read in
// place with op T; anything else oddly strided is packed once.
#include <initializer_list>
#include <limits>
#include <optional>

#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/dispatch.h>

namespace volt::cuda {

std::optional<GemmOperand> gemm_operand(const Shape& sizes, const Shape& strides) {
  const size_t d = sizes.size();
  const int64_t rows = sizes[d - 2], cols = sizes[d - 1], rs = strides[d - 2], cs = strides[d - 1];
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1)))
    return GemmOperand{false, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1)))
    return GemmOperand{true, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  return std::nullopt;
}

std::optional<GemmCall> gemm_call(const Shape& a_sizes, const Shape& a_strides, const Shape& b_sizes,
                                  const Shape& b_strides) {
  const std::optional<GemmOperand> la = gemm_operand(a_sizes, a_strides), lb = gemm_operand(b_sizes, b_strides);
  if (!la || !lb) return std::nullopt;
  const int64_t m = a_sizes[a_sizes.size() - 2], k = a_sizes.back(), n = b_sizes.back();
  return GemmCall{lb->trans, la->trans, n, m, k, lb->ld, la->ld, n};
}

namespace {

// cuBLAS takes sizes, leading dimensions and batch counts as int: a larger
// one is refused with a message instead of wrapping around.
void check_cublas_sizes(std::initializer_list<int64_t> sizes) {
  for (int64_t v : sizes)
    VOLT_CHECK(v <= std::numeric_limits<int>::max(), "matmul",
               "a size of " << v << " is beyond cuBLAS's int sizes (at most " << std::numeric_limits<int>::max() << ")");
}

std::optional<GemmOperand> layout_of(const Tensor& t) { return gemm_operand(t.sizes(), t.strides()); }

// bf16 and f16 GEMMs: cuBLAS's Ex entry points, the 16-bit operands read as
// they are, products accumulated in f32 (CUBLAS_COMPUTE_32F) and the result
// rounded once into the 16-bit output.
cudaDataType half_data_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

void check_gemm_dtypes(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const DType t = out.dtype();
  VOLT_CHECK(t == DType::f32 || t == DType::f64 || is_half(t), op,
             "cuBLAS runs f32, f64, bf16 and f16, got " << dtype_name(t));
  VOLT_CHECK(a.dtype() == t && b.dtype() == t, op,
             "expected operands of the result's dtype " << dtype_name(t) << ", got " << a.meta_str() << " and "
                                                        << b.meta_str());
}

// out (m, n), contiguous = a (m, k) @ b (k, n), beta * out added (bias pre-filled).
void gemm_2d(const Tensor& a0, const Tensor& b0, const Tensor& out, double beta) {
  const int dev = out.device().index;
  Tensor a = a0, b = b0;
  if (!layout_of(a)) a = contiguous_on_device(a);
  if (!layout_of(b)) b = contiguous_on_device(b);
  const GemmCall c = *gemm_call(a.sizes(), a.strides(), b.sizes(), b.strides());
  check_cublas_sizes({c.rows, c.cols, c.inner, c.ld_first, c.ld_second});
  const int n = static_cast<int>(c.rows), m = static_cast<int>(c.cols), k = static_cast<int>(c.inner);
  const int ldb = static_cast<int>(c.ld_first), lda = static_cast<int>(c.ld_second), ldc = static_cast<int>(c.ld_out);
  cublasHandle_t h = cublas_handle(dev);
  DeviceGuard g(dev);
  const cublasOperation_t opb = c.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = c.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (is_half(out.dtype())) {
    const float alpha = 1.0f, bt = static_cast<float>(beta);
    const cudaDataType dt = half_data_type(out.dtype());
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasGemmEx(h, opb, opa, n, m, k, &alpha, b.raw_data(), dt, ldb, a.raw_data(), dt,
                                            lda, &bt, out.raw_data(), dt, ldc, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  } else if (out.dtype() == DType::f32) {
    const float alpha = 1.0f, bt = static_cast<float>(beta);
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasSgemm(h, opb, opa, n, m, k, &alpha, static_cast<const float*>(b.raw_data()), ldb,
                                           static_cast<const float*>(a.raw_data()), lda, &bt,
                                           static_cast<float*>(out.raw_data()), ldc));
  } else {
    const double alpha = 1.0, bt = beta;
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasDgemm(h, opb, opa, n, m, k, &alpha, static_cast<const double*>(b.raw_data()),
                                           ldb, static_cast<const double*>(a.raw_data()), lda, &bt,
                                           static_cast<double*>(out.raw_data()), ldc));
  }
}

}  // namespace

void cublas_matmul(const Tensor& a0, const Tensor& b0, const Tensor& out) {
  check_gemm_dtypes("matmul", a0, b0, out);
  if (out.numel() == 0) return;
  NoGradGuard no_grad;  // the views below are internal, not part of any graph
  Tensor a = a0, b = b0;
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(1);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (k == 0) {
    fill(out, 0.0);
    return;
  }
  Shape batch(out.sizes().begin(), out.sizes().end() - (a1 ? 0 : 1) - (b1 ? 0 : 1));
  if (batch.empty()) {
    gemm_2d(a, b, out, 0.0);
    return;
  }
  // Batched: both operands packed into their broadcast shapes, one strided-batched GEMM.
  Shape ash = batch, bsh = batch;
  ash.push_back(m), ash.push_back(k);
  bsh.push_back(k), bsh.push_back(n);
  Tensor ac = Tensor::empty(ash, a.dtype(), a.device()), bc = Tensor::empty(bsh, b.dtype(), b.device());
  strided_copy(ac, a.expand(ash));
  strided_copy(bc, b.expand(bsh));
  const int dev = out.device().index;
  check_cublas_sizes({m, n, k, shape_numel(batch)});
  const int batches = static_cast<int>(shape_numel(batch));
  cublasHandle_t h = cublas_handle(dev);
  DeviceGuard g(dev);
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (is_half(out.dtype())) {
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType dt = half_data_type(out.dtype());
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, bc.raw_data(),
                                                          dt, N, k * n, ac.raw_data(), dt, K, m * k, &beta,
                                                          out.raw_data(), dt, N, m * n, batches, CUBLAS_COMPUTE_32F,
                                                          CUBLAS_GEMM_DEFAULT));
  } else if (out.dtype() == DType::f32) {
    const float alpha = 1.0f, beta = 0.0f;
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha,
                                                static_cast<const float*>(bc.raw_data()), N, k * n,
                                                static_cast<const float*>(ac.raw_data()), K, m * k, &beta,
                                                static_cast<float*>(out.raw_data()), N, m * n, batches));
  } else {
    const double alpha = 1.0, beta = 0.0;
    count_cublas_call();
    VOLT_CUBLAS_CHECK(cublas().cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha,
                                                static_cast<const double*>(bc.raw_data()), N, k * n,
                                                static_cast<const double*>(ac.raw_data()), K, m * k, &beta,
                                                static_cast<double*>(out.raw_data()), N, m * n, batches));
  }
}

void cublas_linear(const Tensor& x0, const Tensor& w, const Tensor* bias, const Tensor& out) {
  check_gemm_dtypes("linear", x0, w, out);
  if (bias)
    VOLT_CHECK(bias->dtype() == out.dtype(), "linear",
               "expected a bias of the result's dtype " << dtype_name(out.dtype()) << ", got " << bias->meta_str());
  if (out.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor x = x0.dim() == 2 ? x0 : contiguous_on_device(x0).reshape({-1, x0.size(-1)});
  Tensor o = out.reshape({-1, w.size(0)});
  if (x.size(1) == 0) {
    if (bias) strided_copy(o, bias->expand(o.sizes()));
    else fill(out, 0.0);
    return;
  }
  if (bias && cublaslt_linear_bias(x, w, *bias, o)) return;
  // The bias is broadcast into the output first and the GEMM adds onto it (beta = 1).
  if (bias) strided_copy(o, bias->expand(o.sizes()));
  gemm_2d(x, w.t(), o, bias ? 1.0 : 0.0);
}

}  // namespace volt::cuda
