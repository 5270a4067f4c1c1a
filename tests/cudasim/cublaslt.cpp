// cudasim: the cuBLASLt calls volt makes (tensor/cuda/matmul_lt.cpp): f32
// matrices, f32 scale, compute type 32F or 32F_FAST_TF32, the ops of A and B,
// and the DEFAULT, BIAS (a bias of D's rows, broadcast along its columns) or
// BGRADB epilogue (the sums of op(B) over the inner dimension, one per column
// of D, written to the bias pointer).  The product is summed in double, as the plain GEMMs of
// cublas.cpp are, and alpha * product + beta * C + bias rounded once, so a
// linear with its bias in the epilogue has the bits of the plain path (bias
// copied into the output, then the GEMM added with beta = 1).  Anything else
// volt does not ask for is CUBLAS_STATUS_NOT_SUPPORTED.
#include "sim.h"

#include <cublasLt.h>

#include <cmath>
#include <cstring>

struct cublasLtContext {
  int device = 0;
};
struct SimLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct SimLtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct SimLtPreference {
  size_t workspace = 0;
};

namespace cudasim {
namespace {

template <class T>
bool set_from(const void* buf, size_t bytes, T& out) {
  if (!buf || bytes != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

// The extent in elements of a stored matrix.
size_t extent(const SimLtLayout* l) { return (size_t(l->cols) - 1) * size_t(l->ld) + size_t(l->rows); }

// What a matmul with these descriptors would compute: rows m, cols n, inner k; false if inconsistent.
bool shapes(const SimLtDesc* d, const SimLtLayout* a, const SimLtLayout* b, const SimLtLayout* c,
            const SimLtLayout* dl, uint64_t& m, uint64_t& n, uint64_t& k) {
  if (!d || !a || !b || !dl) return false;
  for (const SimLtLayout* l : {a, b, dl})
    if (l->type != CUDA_R_32F || l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows))) return false;
  const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
  if (ak != bk || am != dl->rows || bn != dl->cols) return false;
  if (c && (c->rows != dl->rows || c->cols != dl->cols || c->type != CUDA_R_32F)) return false;
  m = am, n = bn, k = ak;
  return true;
}

bool supported(const SimLtDesc* d) {
  return d && d->scale == CUDA_R_32F && (d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_FAST_TF32) &&
         (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT || d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
          d->epilogue == CUBLASLT_EPILOGUE_BGRADB);
}

}  // namespace
}  // namespace cudasim

using namespace cudasim;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new SimLtDesc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<SimLtDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  SimLtDesc* d = reinterpret_cast<SimLtDesc*>(desc);
  if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: {
      int32_t v;
      ok = set_from(buf, bytes, v) && (v == CUBLAS_OP_N || v == CUBLAS_OP_T);
      if (ok) d->ta = static_cast<cublasOperation_t>(v);
      break;
    }
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t v;
      ok = set_from(buf, bytes, v) && (v == CUBLAS_OP_N || v == CUBLAS_OP_T);
      if (ok) d->tb = static_cast<cublasOperation_t>(v);
      break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t v;
      ok = set_from(buf, bytes, v);
      if (ok) d->epilogue = static_cast<cublasLtEpilogue_t>(v);
      break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = set_from(buf, bytes, d->bias); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new SimLtLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<SimLtLayout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new SimLtPreference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<SimLtPreference*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  SimLtPreference* p = reinterpret_cast<SimLtPreference*>(pref);
  if (!p) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  uint64_t v;
  if (!set_from(buf, bytes, v)) return CUBLAS_STATUS_INVALID_VALUE;
  p->workspace = v;
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm for whatever the simulator supports; none otherwise.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested < 1 || !results || !count) return CUBLAS_STATUS_INVALID_VALUE;
  const SimLtDesc* D = reinterpret_cast<const SimLtDesc*>(desc);
  uint64_t m, n, k;
  *count = 0;
  if (!supported(D) || !shapes(D, reinterpret_cast<const SimLtLayout*>(a), reinterpret_cast<const SimLtLayout*>(b),
                               reinterpret_cast<const SimLtLayout*>(c), reinterpret_cast<const SimLtLayout*>(d), m, n, k))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = 0x5113;  // the simulator's one algorithm
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta C (+ bias[i] on row i), column-major.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t al, const void* B, cublasLtMatrixLayout_t bl, const void* beta,
                              const void* C, cublasLtMatrixLayout_t cl, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const SimLtDesc* d = reinterpret_cast<const SimLtDesc*>(desc);
  const SimLtLayout *la = reinterpret_cast<const SimLtLayout*>(al), *lb = reinterpret_cast<const SimLtLayout*>(bl),
                    *lc = reinterpret_cast<const SimLtLayout*>(cl), *ld = reinterpret_cast<const SimLtLayout*>(dl);
  uint64_t m, n, k;
  if (!supported(d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!alpha || !beta || !shapes(d, la, lb, lc, ld, m, n, k) || (algo && algo->data[0] != 0x5113) ||
      (workspace_bytes && !workspace))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al_v = *static_cast<const float*>(alpha), be_v = *static_cast<const float*>(beta);
  const bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS, bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if ((k > 0 && (!within_allocation(A, extent(la) * 4) || !within_allocation(B, extent(lb) * 4))) ||
      !within_allocation(D, extent(ld) * 4) || (be_v != 0 && (!C || !lc || !within_allocation(C, extent(lc) * 4))) ||
      (bias && (!d->bias || !within_allocation(d->bias, m * 4))) ||
      (bgrad && (!d->bias || !within_allocation(d->bias, n * 4))))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const cublasOperation_t ta = d->ta, tb = d->tb;
  const int64_t lda = la->ld, ldb = lb->ld, ldc = lc ? lc->ld : 0, ldd = ld->ld;
  const float *a = static_cast<const float*>(A), *b = static_cast<const float*>(B), *c = static_cast<const float*>(C),
              *bv = static_cast<const float*>(d->bias);
  float* out = static_cast<float*>(D);
  std::string what = "cuBLASLt matmul m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                     (bias ? " epilogue=BIAS" : bgrad ? " epilogue=BGRADB" : "");
  enqueue(stream, what, [=] {
    auto op = [&](float v) { return tf32 ? to_tf32(v) : double(v); };
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        double acc = 0;
        for (uint64_t p = 0; p < k; ++p) {
          const float x = ta == CUBLAS_OP_N ? a[i + p * lda] : a[p + i * lda];
          const float y = tb == CUBLAS_OP_N ? b[p + j * ldb] : b[j + p * ldb];
          acc += op(x) * op(y);
        }
        double r = double(al_v) * acc + (be_v == 0.0f ? 0.0 : double(be_v) * double(c[i + j * ldc]));
        if (bias) r += double(bv[i]);
        out[i + j * ldd] = static_cast<float>(r);
      }
    if (bgrad) {  // column j of op(B), summed over the inner dimension
      float* db = static_cast<float*>(const_cast<void*>(static_cast<const void*>(bv)));
      for (uint64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (uint64_t p = 0; p < k; ++p) acc += tb == CUBLAS_OP_N ? b[p + j * ldb] : b[j + p * ldb];
        db[j] = static_cast<float>(acc);
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
