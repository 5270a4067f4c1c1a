// cudasim: the cuBLAS GEMMs volt calls, queued on the handle's stream and
// computed on the host in double.  With the TF32 math mode set, f32 operands
// are first rounded to TF32 (10 bits of mantissa), as tensor cores read them.
#include "sim.h"

#include <algorithm>
#include <cmath>
#include <cstring>

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace cudasim {
namespace {

// An f32 value with its mantissa rounded to TF32's 10 bits (to nearest even).
double to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0xFFFu + ((bits >> 13) & 1u);
  bits &= ~0x1FFFu;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

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

template <class T>
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,
                            const T* beta, T* C, int ldc, long long sc, int batches) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batches < 0 ||
      lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batches == 0) return CUBLAS_STATUS_SUCCESS;
  // Every operand must lie in device memory: the extents cuBLAS will touch.
  auto extent = [](int rows, int cols, int ld) { return (size_t(cols) - 1) * ld + rows; };
  const size_t ea = ta == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda);
  const size_t eb = tb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb);
  for (int b = 0; b < batches; ++b)
    if ((k > 0 && (!within_allocation(A + b * sa, ea * sizeof(T)) || !within_allocation(B + b * sb, eb * sizeof(T)))) ||
        !within_allocation(C + b * sc, extent(m, n, ldc) * sizeof(T)))
      return CUBLAS_STATUS_INVALID_VALUE;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  const bool tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  std::string what = "cuBLAS gemm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  if (batches > 1) what += " batches=" + std::to_string(batches);
  enqueue(h->stream, what, [=] {
    for (int b = 0; b < batches; ++b) gemm_cm<T>(ta, tb, m, n, k, al, A + b * sa, lda, B + b * sb, ldb, be, C + b * sc, ldc, tf32);
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
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
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

}  // extern "C"
