// cudasim: the cuBLAS GEMMs volt calls, queued on the handle's stream and
// computed on the host in double.  With the TF32 math mode set, f32 operands
// are first rounded to TF32 (10 bits of mantissa), as tensor cores read them.
// The Ex GEMMs on bf16/f16 compute in f32 (CUBLAS_COMPUTE_32F): products
// summed in float, the result rounded once into the 16-bit output.
#include "sim.h"

#include <volt/tensor/half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace cudasim {
namespace {

template <class T>
double operand(T v, bool tf32) {
  if constexpr (std::is_same_v<T, float>) return tf32 ? to_tf32(v) : double(v);
  return double(v);
}

// C = alpha op(A) op(B) + beta C, column-major, accumulated in double.
template <class T>
void gemm_cm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A, int lda,
             const T* B, int ldb, T beta, T* C, int ldc, bool tf32) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const T a = ta == CUBLAS_OP_N ? A[i + size_t(p) * lda] : A[p + size_t(i) * lda];
        const T b = tb == CUBLAS_OP_N ? B[p + size_t(j) * ldb] : B[j + size_t(p) * ldb];
        acc += operand(a, tf32) * operand(b, tf32);
      }
      T& c = C[i + size_t(j) * ldc];
      // beta == 0 ignores C (it may hold NaN), as BLAS specifies.
      c = static_cast<T>(double(alpha) * acc + (beta == T(0) ? 0.0 : double(beta) * double(c)));
    }
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

// The checks every GEMM makes: the handle, the ops and sizes, and operands of
// `elem` bytes lying in device memory over the extents cuBLAS will touch.
cublasStatus_t check_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const void* A, int lda, long long sa, const void* B, int ldb, long long sb, const void* C,
                          int ldc, long long sc, int batches, size_t elem) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batches < 0 ||
      lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batches == 0) return CUBLAS_STATUS_SUCCESS;
  auto extent = [](int rows, int cols, int ld) { return (size_t(cols) - 1) * ld + rows; };
  const size_t ea = ta == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda);
  const size_t eb = tb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb);
  auto at = [elem](const void* p, long long i) { return static_cast<const char*>(p) + i * static_cast<long long>(elem); };
  for (int b = 0; b < batches; ++b)
    if ((k > 0 && (!within_allocation(at(A, b * sa), ea * elem) || !within_allocation(at(B, b * sb), eb * elem))) ||
        !within_allocation(at(C, b * sc), extent(m, n, ldc) * elem))
      return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

std::string gemm_label(int m, int n, int k, int batches) {
  std::string what = "cuBLAS gemm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  if (batches > 1) what += " batches=" + std::to_string(batches);
  return what;
}

template <class T>
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,
                            const T* beta, T* C, int ldc, long long sc, int batches) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const cublasStatus_t st = check_gemm(h, ta, tb, m, n, k, A, lda, sa, B, ldb, sb, C, ldc, sc, batches, sizeof(T));
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batches == 0) return st;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  const bool tf32 = (h->math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH;  // (the flags above 0xf change nothing here)
  enqueue(h->stream, gemm_label(m, n, k, batches), [=] {
    for (int b = 0; b < batches; ++b) gemm_cm<T>(ta, tb, m, n, k, al, A + b * sa, lda, B + b * sb, ldb, be, C + b * sc, ldc, tf32);
  });
  return CUBLAS_STATUS_SUCCESS;
}

// Element i of an Ex operand of type t, as float; and a float stored into one.
float ex_load(const void* p, cudaDataType t, size_t i) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  if (t == CUDA_R_16BF) return volt::BF16{h[i]}.to_float();
  if (t == CUDA_R_16F) return volt::F16{h[i]}.to_float();
  return static_cast<const float*>(p)[i];
}
void ex_store(void* p, cudaDataType t, size_t i, float v) {
  if (t == CUDA_R_16BF) static_cast<uint16_t*>(p)[i] = volt::BF16::from_float(v).bits;
  else if (t == CUDA_R_16F) static_cast<uint16_t*>(p)[i] = volt::F16::from_float(v).bits;
  else static_cast<float*>(p)[i] = v;
}

// C = alpha op(A) op(B) + beta C, column-major, A, B and C all of type t,
// accumulated in float (the f32 compute type).
void gemm_ex_cm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* A,
                int lda, const void* B, int ldb, float beta, void* C, int ldc, cudaDataType t) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0;
      for (int p = 0; p < k; ++p) {
        const float a = ex_load(A, t, ta == CUBLAS_OP_N ? i + size_t(p) * lda : p + size_t(i) * lda);
        const float b = ex_load(B, t, tb == CUBLAS_OP_N ? p + size_t(j) * ldb : j + size_t(p) * ldb);
        acc += a * b;
      }
      const size_t c = i + size_t(j) * ldc;
      ex_store(C, t, c, alpha * acc + (beta == 0.0f ? 0.0f : beta * ex_load(C, t, c)));
    }
}

cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                       cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                       long long sc, int batches, cublasComputeType_t compute) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // What volt asks for: one storage type throughout, computed in f32.
  const bool type_ok = at == bt && bt == ct && (ct == CUDA_R_16BF || ct == CUDA_R_16F || ct == CUDA_R_32F);
  if (!type_ok || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const size_t elem = ct == CUDA_R_32F ? 4 : 2;
  const cublasStatus_t st = check_gemm(h, ta, tb, m, n, k, A, lda, sa, B, ldb, sb, C, ldc, sc, batches, elem);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batches == 0) return st;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto at_batch = [elem](const void* p, long long i) { return static_cast<const char*>(p) + i * static_cast<long long>(elem); };
  enqueue(h->stream, gemm_label(m, n, k, batches) + " (Ex)", [=] {
    for (int b = 0; b < batches; ++b)
      gemm_ex_cm(ta, tb, m, n, k, al, at_batch(A, b * sa), lda, at_batch(B, b * sb), ldb, be,
                 const_cast<char*>(at_batch(C, b * sc)), ldc, ct);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace cudasim

using namespace cudasim;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// The simulated GEMMs need no scratch memory; the workspace is only checked.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!workspace && bytes) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return gemm_batched<float>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const double* alpha, const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return gemm_batched<double>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batches) {
  return gemm_batched<float>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batches);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sa,
                                         const double* B, int ldb, long long sb, const double* beta, double* C,
                                         int ldc, long long sc, int batches) {
  return gemm_batched<double>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batches);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sc,
                                          int batches, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batches, compute);
}

}  // extern "C"
