// cudasim: the cuBLASLt calls volt makes (tensor/cuda/matmul_lt.cpp): A, B,
// C and D all f32, bf16 or f16, f32 scale, compute type 32F (or
// 32F_FAST_TF32 for f32), the ops of A and B, and the epilogues DEFAULT, BIAS
// (a bias of D's rows, broadcast along its columns), RELU_BIAS, GELU_BIAS and
// GELU_AUX_BIAS (bias, then ReLU, max(v, 0), or GELU's tanh approximation
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))); the _AUX form also stores
// the pre-activation at the aux pointer, laid out as D with EPILOGUE_AUX_LD),
// RELU, GELU and GELU_AUX (the same without a bias), and BGRADB (the sums
// of op(B) over the inner dimension, one per column of D, written to the bias
// pointer).  The bias, the bias
// gradient and the aux matrix are of D's type, cuBLASLt's default.  f32: the
// product summed in double, as the plain GEMMs of cublas.cpp are, and
// alpha * product + beta * C + bias rounded once, so a linear with its bias
// in the epilogue has the bits of the plain path (bias copied into the
// output, then the GEMM added with beta = 1).  bf16/f16: the 16-bit values
// multiplied and summed in float and the result (activation included)
// rounded once into D, as cublas.cpp's Ex GEMMs, so again the plain path's
// bits.  Anything else volt does not ask for is CUBLAS_STATUS_NOT_SUPPORTED.
#include "sim.h"

#include <cublasLt.h>

#include <volt/tensor/half.h>

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
  void* aux = nullptr;
  int64_t aux_ld = 0;
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
  const cudaDataType t = dl->type;
  if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) return false;
  if (t != CUDA_R_32F && d->compute != CUBLAS_COMPUTE_32F) return false;
  for (const SimLtLayout* l : {a, b, dl})
    if (l->type != t || l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows))) return false;
  const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
  if (ak != bk || am != dl->rows || bn != dl->cols) return false;
  if (c && (c->rows != dl->rows || c->cols != dl->cols || c->type != t)) return false;
  if ((d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX) && d->aux_ld < static_cast<int64_t>(std::max<uint64_t>(1, am)))
    return false;
  m = am, n = bn, k = ak;
  return true;
}

bool supported(const SimLtDesc* d) {
  if (!d || d->scale != CUDA_R_32F || (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32))
    return false;
  switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    default: return false;
  }
}

size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// Element i of a matrix or vector of type t, as double; a value rounded once into one.
double load(const void* p, cudaDataType t, size_t i) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  if (t == CUDA_R_16BF) return volt::BF16{h[i]}.to_float();
  if (t == CUDA_R_16F) return volt::F16{h[i]}.to_float();
  return static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType t, size_t i, double v) {
  const float f = static_cast<float>(v);
  if (t == CUDA_R_16BF) static_cast<uint16_t*>(p)[i] = volt::BF16::from_float(f).bits;
  else if (t == CUDA_R_16F) static_cast<uint16_t*>(p)[i] = volt::F16::from_float(f).bits;
  else static_cast<float*>(p)[i] = f;
}

// The epilogue's activation (GELU: the tanh approximation).
double activate(cublasLtEpilogue_t e, double v) {
  if (e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_RELU) return v > 0 ? v : 0.0;
  if (e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
      e == CUBLASLT_EPILOGUE_GELU_AUX)
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return v;
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
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = set_from(buf, bytes, d->aux); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = set_from(buf, bytes, d->aux_ld); break;
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
  if (attr == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) {  // no split-k here: any scheme serves
    uint32_t mask;
    return set_from(buf, bytes, mask) && mask <= CUBLASLT_REDUCTION_SCHEME_MASK ? CUBLAS_STATUS_SUCCESS
                                                                               : CUBLAS_STATUS_INVALID_VALUE;
  }
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
  const cublasLtEpilogue_t e = d->epilogue;
  const bool bgrad = e == CUBLASLT_EPILOGUE_BGRADB,
             gelu_aux = e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX;
  const bool bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
                    e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const cudaDataType t = ld->type;
  const size_t w = type_bytes(t);
  if ((k > 0 && (!within_allocation(A, extent(la) * w) || !within_allocation(B, extent(lb) * w))) ||
      !within_allocation(D, extent(ld) * w) || (be_v != 0 && (!C || !lc || !within_allocation(C, extent(lc) * w))) ||
      (bias && (!d->bias || !within_allocation(d->bias, m * w))) ||
      (bgrad && (!d->bias || !within_allocation(d->bias, n * w))) ||
      (gelu_aux && (!d->aux || !within_allocation(d->aux, ((n - 1) * size_t(d->aux_ld) + m) * w))))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32, f32 = t == CUDA_R_32F;
  const cublasOperation_t ta = d->ta, tb = d->tb;
  const int64_t lda = la->ld, ldb = lb->ld, ldc = lc ? lc->ld : 0, ldd = ld->ld, ldx = d->aux_ld;
  const void *a = A, *b = B, *c = C, *bv = d->bias;
  void *out = D, *aux = d->aux;
  static const char* const kNames[] = {"", " epilogue=BIAS", " epilogue=RELU_BIAS", " epilogue=GELU_BIAS",
                                       " epilogue=GELU_AUX_BIAS", " epilogue=BGRADB", " epilogue=RELU",
                                       " epilogue=GELU", " epilogue=GELU_AUX"};
  const int name = e == CUBLASLT_EPILOGUE_BIAS            ? 1
                   : e == CUBLASLT_EPILOGUE_RELU_BIAS     ? 2
                   : e == CUBLASLT_EPILOGUE_GELU_BIAS     ? 3
                   : e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? 4
                   : bgrad                                ? 5
                   : e == CUBLASLT_EPILOGUE_RELU          ? 6
                   : e == CUBLASLT_EPILOGUE_GELU          ? 7
                   : e == CUBLASLT_EPILOGUE_GELU_AUX      ? 8
                                                          : 0;
  std::string what = "cuBLASLt matmul m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                     (f32 ? "" : t == CUDA_R_16BF ? " bf16" : " f16") + kNames[name];
  enqueue(stream, what, [=] {
    // f32: double sums of the operands (TF32-rounded in that mode); 16-bit:
    // float sums of the 16-bit values, as cuBLAS's compute type 32F.
    auto op = [&](double v) { return tf32 ? to_tf32(static_cast<float>(v)) : v; };
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        double acc = 0;
        float facc = 0;
        for (uint64_t p = 0; p < k; ++p) {
          const double x = load(a, t, ta == CUBLAS_OP_N ? i + p * lda : p + i * lda);
          const double y = load(b, t, tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb);
          if (f32) acc += op(x) * op(y);
          else facc += static_cast<float>(x) * static_cast<float>(y);
        }
        double r;
        if (f32) {
          r = double(al_v) * acc + (be_v == 0.0f ? 0.0 : double(be_v) * load(c, t, i + j * ldc));
          if (bias) r += load(bv, t, i);
        } else {
          float fr = al_v * facc + (be_v == 0.0f ? 0.0f : be_v * static_cast<float>(load(c, t, i + j * ldc)));
          if (bias) fr += static_cast<float>(load(bv, t, i));
          r = fr;
        }
        if (gelu_aux) store(aux, t, i + j * ldx, r);
        store(out, t, i + j * ldd, activate(e, r));
      }
    if (bgrad) {  // column j of op(B), summed over the inner dimension
      void* db = const_cast<void*>(bv);
      for (uint64_t j = 0; j < n; ++j) {
        double acc = 0;
        float facc = 0;
        for (uint64_t p = 0; p < k; ++p) {
          const double y = load(b, t, tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb);
          if (f32) acc += y;
          else facc += static_cast<float>(y);
        }
        store(db, t, j, f32 ? acc : double(facc));
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
