// GEMM epilogues of cuBLASLt, so that a vector op beside a GEMM costs no
// launch of its own:
// - linear's bias (CUBLASLT_EPILOGUE_BIAS): out (m, n) = x (m, k) W^T + bias in
//   one call, where cuBLAS's plain path first broadcasts the bias into out (a
//   kernel) and adds the product onto it;
// - a weight's gradient with its bias's (CUBLASLT_EPILOGUE_BGRADB): dW = g^T x
//   and db = the sum of g's rows in one call, where the plain path runs a
//   reduction kernel after the GEMM;
// - linear's bias and then ReLU or GELU (RELU_BIAS, GELU_BIAS; GELU_AUX_BIAS
//   also writes the pre-activation, which GELU's backward reads), for a
//   caller with a linear followed by the activation.  cuBLASLt's GELU is the
//   tanh approximation.  Without a bias: RELU, GELU, GELU_AUX.  The jit's
//   pass "cuBLASLt activation epilogue" (jit/cuda/lt_activation.cpp) takes
//   a linear followed by relu or gelu(x, "tanh") into them.
//
// f32 (compute 32F, or 32F_FAST_TF32 with allow_tf32) and bf16/f16: A, B and
// D in the 16-bit type, compute and scale type f32, the product accumulated
// in f32 and rounded once into D.  The bias vector, a bias gradient and the
// GELU input kept for backward are of D's type, as cuBLASLt documents for
// these combinations (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and _AUX_DATA_TYPE
// left at their defaults).
//
// Column-major, as cuBLAS sees a row-major out (m, n) = a (m, k) b (k, n):
// D = out^T (n x m, ld n) = op(A) op(B) with A = b's matrix and B = a's
// (gemm_call() gives the ops and leading dimensions).  BIAS broadcasts a
// vector of D's n rows along its columns; BGRADB writes the sums of op(B)
// over the inner dimension, one per column of D.  One descriptor, three
// layouts and the heuristic's algorithm are kept per shape and epilogue; only
// the vector's pointer changes call to call.  The workspace is cuBLAS's own
// (same stream, so never used at once).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <map>
#include <mutex>
#include <tuple>

#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/cuda/runtime.h>

namespace volt::cuda {

namespace {

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // all of the key's dtype
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // the heuristic found an algorithm
};

// (device, epilogue, dtype, trans a, trans b, m, n, k, lda, ldb, ldd, tf32)
using LtKey = std::tuple<int, int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

struct LtState {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handle;  // per device
  std::map<LtKey, LtPlan> plans;
};

LtState& lt_state() {
  static LtState* s = new LtState;  // plans live as long as the process
  return *s;
}

bool lt_dtype(DType t) { return t == DType::f32 || is_half(t); }

cudaDataType lt_data_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// A layout of the matrix as stored: `rows x cols` column-major, leading dimension ld.
cublasLtMatrixLayout_t layout(const CublasLtApi& lt, cudaDataType type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  VOLT_CUBLAS_CHECK(
      lt.cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  return l;
}

LtPlan make_plan(const CublasLtApi& lt, cublasLtHandle_t h, const GemmCall& c, cublasLtEpilogue_t epilogue,
                 DType dtype, bool tf32, size_t workspace) {
  LtPlan p;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType type = lt_data_type(dtype);
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  const cublasOperation_t ta = c.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  // A (rows x inner after its op), B (inner x cols after its op), D (rows x cols).
  p.a = c.trans_first ? layout(lt, type, c.inner, c.rows, c.ld_first) : layout(lt, type, c.rows, c.inner, c.ld_first);
  p.b = c.trans_second ? layout(lt, type, c.cols, c.inner, c.ld_second)
                       : layout(lt, type, c.inner, c.cols, c.ld_second);
  p.d = layout(lt, type, c.rows, c.cols, c.ld_out);
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX) {
    // the pre-activation, laid out as D
    const int64_t ld = c.ld_out;
    VOLT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  cublasLtMatmulPreference_t pref = nullptr;
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                            sizeof workspace));
  // Split-k partial sums in f32 only, never in a 16-bit output's type (as
  // cuBLAS's math mode, tensor/cuda/runtime.cpp).
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  VOLT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                            &reductions, sizeof reductions));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      lt.cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.usable = true;
  }
  return p;
}

// One cuBLASLt GEMM of row-major a (m, k) @ b (k, n) into out (contiguous),
// with `epilogue`, its vector at `vec` and, for GELU_AUX_BIAS, the
// pre-activation written to `aux` (out's shape); false where no plan applies.
bool lt_gemm(const Tensor& a, const Tensor& b, const Tensor& out, cublasLtEpilogue_t epilogue, const void* vec,
             const void* aux = nullptr) {
  const CublasLtApi* lt = cublas_lt();
  const DType t = out.dtype();
  if (!lt || !lt_dtype(t) || a.dtype() != t || b.dtype() != t || a.dim() != 2 || b.dim() != 2 || out.dim() != 2 ||
      !out.is_contiguous())
    return false;
  // The heuristic assumes every pointer aligned to 256 bytes (cuBLASLt's
  // default minimum alignments); a view that is not takes the plain path.
  for (const void* p : std::initializer_list<const void*>{a.raw_data(), b.raw_data(), out.raw_data(), vec, aux})
    if (reinterpret_cast<uintptr_t>(p) % 256 != 0) return false;
  const std::optional<GemmCall> call = gemm_call(a.sizes(), a.strides(), b.sizes(), b.strides());
  if (!call) return false;
  const GemmCall& c = *call;
  for (int64_t v : {c.rows, c.cols, c.inner, c.ld_first, c.ld_second, c.ld_out})
    if (v > INT32_MAX || v < 1) return false;  // the plain path reports or handles it
  const int dev = out.device().index;
  size_t workspace_bytes = 0;
  void* workspace = cublas_workspace(dev, &workspace_bytes);
  const bool tf32 = t == DType::f32 && allow_tf32();
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  DeviceGuard g(dev);
  cublasLtHandle_t& h = s.handle[dev];
  if (!h) VOLT_CUBLAS_CHECK(lt->cublasLtCreate(&h));
  const LtKey key{dev,     static_cast<int>(epilogue), static_cast<int>(t), c.trans_first, c.trans_second, c.rows,
                  c.cols,  c.inner,                    c.ld_first,          c.ld_second,   c.ld_out,       tf32};
  auto it = s.plans.find(key);
  if (it == s.plans.end()) it = s.plans.emplace(key, make_plan(*lt, h, c, epilogue, t, tf32, workspace_bytes)).first;
  LtPlan& p = it->second;
  if (!p.usable) return false;
  if (vec)
    VOLT_CUBLAS_CHECK(lt->cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec));
  if (aux)
    VOLT_CUBLAS_CHECK(
        lt->cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  const float alpha = 1.0f, beta = 0.0f;
  count_cublas_call();
  // cuBLAS's first operand is b (column-major C^T = B^T A^T), as in gemm_2d.
  VOLT_CUBLAS_CHECK(lt->cublasLtMatmul(h, p.desc, &alpha, b.raw_data(), p.a, a.raw_data(), p.b, &beta, out.raw_data(),
                                       p.d, out.raw_data(), p.d, &p.algo, workspace, workspace_bytes, stream(dev)));
  return true;
}

}  // namespace

// Without a bias (undefined), the activation alone: RELU, GELU or GELU_AUX.
bool cublaslt_linear_bias(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                          LtActivation act, const Tensor* pre) {
  const bool has_bias = bias.defined();
  if (out.dim() != 2 || (!has_bias && act == LtActivation::none)) return false;
  if (has_bias &&
      (bias.dim() != 1 || !bias.is_contiguous() || bias.dtype() != out.dtype() || bias.size(0) != out.size(1)))
    return false;
  if (pre && (act != LtActivation::gelu_tanh || pre->dtype() != out.dtype() || pre->sizes() != out.sizes() ||
              !pre->is_contiguous()))
    return false;
  cublasLtEpilogue_t e;
  if (act == LtActivation::relu) e = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (act == LtActivation::none) e = CUBLASLT_EPILOGUE_BIAS;
  else if (pre) e = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else e = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  return lt_gemm(x, w.t(), out, e, has_bias ? bias.raw_data() : nullptr, pre ? pre->raw_data() : nullptr);
}

// dw (n, k) = g^T x: the column-major D = dw^T = x^T g, B = g^T read with op T,
// and BGRADB sums op(B) over the GEMM's inner (batch) dimension: db (n).
bool cublaslt_matmul_bias_grad(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db) {
  if (g.dim() != 2 || db.dim() != 1 || !db.is_contiguous() || db.dtype() != dw.dtype() || db.size(0) != g.size(1))
    return false;
  return lt_gemm(g.t(), x, dw, CUBLASLT_EPILOGUE_BGRADB, db.raw_data());
}

}  // namespace volt::cuda
