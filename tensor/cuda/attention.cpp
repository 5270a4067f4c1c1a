// Attention on CUDA devices without the (L, S) matrix: the online-softmax
// forward and the recomputing backward of tensor/cpu/attention.cpp, one GPU
// thread per row.  The forward's blocks stage key and value tiles in shared
// memory; the backward is two kernels, one per query row (D and dq) and one
// per key row (dk and dv), so every gradient has one writer and no atomics.
// No warp shuffles: the kernels also run on tests/cudasim.  bf16 and f16
// operands are loaded into float and the results rounded once when stored
// (ST is the storage type, T the type of the arithmetic), as on the CPU; lse
// and D stay in float.
#include <volt/tensor/cuda/attention.h>

#include <sstream>

#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/runtime.h>

namespace volt::cuda {

namespace {

constexpr int kRows = 64;  // threads (rows) per block
constexpr int kTile = 32;  // keys per shared-memory tile in the forward

const char* kind_name(AttentionKernel w) {
  switch (w) {
    case AttentionKernel::Forward: return "forward";
    case AttentionKernel::BackwardQuery: return "backward_query";
    case AttentionKernel::BackwardKey: return "backward_key";
  }
  return "?";
}

// The C expression that loads a stored element into T, and the one that rounds a T into storage.
std::string load_expr(DType t) {
  if (t == DType::bf16) return "volt_bf16_to_f32(x)";
  if (t == DType::f16) return "volt_f16_to_f32(x)";
  return "(x)";
}
std::string store_expr(DType t) {
  if (t == DType::bf16) return "volt_f32_to_bf16(x)";
  if (t == DType::f16) return "volt_f32_to_f16(x)";
  return "(x)";
}

// What every kernel starts with: the types, head dims and math by dtype (as
// macros, undefined again at its end, so that sources can be compiled side by
// side), and, once, the dropout factor of element counter n (tensor/attention.h).
std::string common(DType t, int E, int Ev) {
  const bool f32 = t != DType::f64;  // bf16 and f16 compute in float
  std::ostringstream os;
  os << "#ifndef VOLT_FLASH_KEEP\n#define VOLT_FLASH_KEEP\n";
  for (const char* d : {"f32", "f64"}) {
    const char* c = d[1] == '3' ? "float" : "double";
    os << "__device__ inline " << c << " volt_flash_keep_" << d
       << "(double p, unsigned long long seed, unsigned long long n) {\n"
       << "  if (p <= 0) return (" << c << ")1;\n"
       << "  const " << c << " keep = (" << c << ")(1.0 - p), inv = (" << c << ")(1.0 - p > 0 ? 1.0 / (1.0 - p) : 0.0);\n"
       << "  return volt_uniform_" << d << "(seed, n, 0ull) < keep ? inv : (" << c << ")0;\n}\n";
  }
  os << "#endif\n"
     << "#define T " << (f32 ? "float" : "double") << "\n"
     << "#define ST " << (is_half(t) ? "unsigned short" : f32 ? "float" : "double") << "\n"
     << "#define LD(x) " << load_expr(t) << "\n#define TO(x) " << store_expr(t) << "\n"
     << "#define E " << E << "\n#define EV " << Ev << "\n#define TILE " << kTile << "\n"
     << "#define VEXP " << (f32 ? "expf" : "exp") << "\n#define VLOG " << (f32 ? "logf" : "log") << "\n"
     << "#define volt_keep volt_flash_keep_" << (f32 ? "f32" : "f64") << "\n"
     << "// below every finite score: exp(LOWEST - m) is 0, and no infinity is needed\n"
     << "#define LOWEST ((T)" << (f32 ? "-3.0e38" : "-1.0e308") << ")\n";
  return os.str();
}

// q (BH, L, E), k (BH, S, E), v (BH, S, EV) -> out (BH, L, EV), lse (BH, L).
// grid (ceil(L / blockDim), BH); every thread of a block loads the tiles.
const char* kForwardBody = R"cu(
  __shared__ ST ks[TILE * E];
  __shared__ ST vs[TILE * EV];
  const long long bh = blockIdx.y;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = i < L;
  T qr[E], acc[EV], s[TILE];
  for (int e = 0; e < E; ++e) qr[e] = active ? LD(q[(bh * L + i) * E + e]) : (T)0;
  for (int e = 0; e < EV; ++e) acc[e] = (T)0;
  T m = LOWEST, l = (T)0;
  long long last = ((long long)blockIdx.x + 1) * blockDim.x;  // rows of this block end before it
  if (last > L) last = L;
  const long long key_end = causal && last < S ? last : S;
  const unsigned long long base = offset + (unsigned long long)((bh * L + i) * S);
  for (long long j0 = 0; j0 < key_end; j0 += TILE) {
    const int n = key_end - j0 < TILE ? (int)(key_end - j0) : TILE;
    __syncthreads();
    for (int t = threadIdx.x; t < n * E; t += blockDim.x) ks[t] = k[(bh * S + j0) * E + t];
    for (int t = threadIdx.x; t < n * EV; t += blockDim.x) vs[t] = v[(bh * S + j0) * EV + t];
    __syncthreads();
    if (!active || (causal && j0 > i)) continue;
    int seen = n;  // keys of the tile this row sees
    if (causal && i - j0 + 1 < seen) seen = (int)(i - j0 + 1);
    T mx = m;
    for (int c = 0; c < seen; ++c) {
      T dot = (T)0;
      for (int e = 0; e < E; ++e) dot += qr[e] * LD(ks[c * E + e]);
      s[c] = dot * scale;
      if (s[c] > mx) mx = s[c];
    }
    const T alpha = VEXP(m - mx);
    for (int e = 0; e < EV; ++e) acc[e] *= alpha;
    T sum = (T)0;
    for (int c = 0; c < seen; ++c) {
      const T pc = VEXP(s[c] - mx);
      sum += pc;
      const T w = pc * volt_keep(p, seed, base + (unsigned long long)(j0 + c));
      for (int e = 0; e < EV; ++e) acc[e] += w * LD(vs[c * EV + e]);
    }
    l = l * alpha + sum;
    m = mx;
  }
  if (!active) return;
  const T inv = l > (T)0 ? (T)1 / l : (T)0;
  for (int e = 0; e < EV; ++e) out[(bh * L + i) * EV + e] = TO(acc[e] * inv);
  lse[bh * L + i] = m + VLOG(l);
)cu";

// One thread per query row: D[i] = rowsum(dO o O), then dq.  grid (ceil(L / blockDim), BH).
const char* kBackwardQueryBody = R"cu(
  const long long bh = blockIdx.y;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= L) return;
  T qr[E], gr[EV], dq[E];
  T D = (T)0;
  for (int e = 0; e < EV; ++e) {
    gr[e] = LD(g[(bh * L + i) * EV + e]);
    D += gr[e] * LD(out[(bh * L + i) * EV + e]);
  }
  Dbuf[bh * L + i] = D;
  for (int e = 0; e < E; ++e) {
    qr[e] = LD(q[(bh * L + i) * E + e]);
    dq[e] = (T)0;
  }
  const T li = lse[bh * L + i];
  const long long key_end = causal && i + 1 < S ? i + 1 : S;
  const unsigned long long base = offset + (unsigned long long)((bh * L + i) * S);
  for (long long j = 0; j < key_end; ++j) {
    const ST* kj = k + (bh * S + j) * E;
    const ST* vj = v + (bh * S + j) * EV;
    T sc = (T)0, dp = (T)0;
    for (int e = 0; e < E; ++e) sc += qr[e] * LD(kj[e]);
    for (int e = 0; e < EV; ++e) dp += gr[e] * LD(vj[e]);
    const T pij = VEXP(sc * scale - li);
    const T ds = pij * (dp * volt_keep(p, seed, base + (unsigned long long)j) - D) * scale;
    for (int e = 0; e < E; ++e) dq[e] += ds * LD(kj[e]);
  }
  for (int e = 0; e < E; ++e) dqo[(bh * L + i) * E + e] = TO(dq[e]);
)cu";

// One thread per key row: dk and dv (reads D from the query kernel).  grid (ceil(S / blockDim), BH).
const char* kBackwardKeyBody = R"cu(
  const long long bh = blockIdx.y;
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= S) return;
  T kr[E], vr[EV], dk[E], dv[EV];
  for (int e = 0; e < E; ++e) {
    kr[e] = LD(k[(bh * S + j) * E + e]);
    dk[e] = (T)0;
  }
  for (int e = 0; e < EV; ++e) {
    vr[e] = LD(v[(bh * S + j) * EV + e]);
    dv[e] = (T)0;
  }
  for (long long i = causal ? j : 0; i < L; ++i) {
    const ST* qi = q + (bh * L + i) * E;
    const ST* gi = g + (bh * L + i) * EV;
    T sc = (T)0, dp = (T)0;
    for (int e = 0; e < E; ++e) sc += LD(qi[e]) * kr[e];
    for (int e = 0; e < EV; ++e) dp += LD(gi[e]) * vr[e];
    const T pij = VEXP(sc * scale - lse[bh * L + i]);
    const T z = volt_keep(p, seed, offset + (unsigned long long)((bh * L + i) * S + j));
    const T ds = pij * (dp * z - Dbuf[bh * L + i]) * scale;
    for (int e = 0; e < EV; ++e) dv[e] += pij * z * LD(gi[e]);
    for (int e = 0; e < E; ++e) dk[e] += ds * LD(qi[e]);
  }
  for (int e = 0; e < E; ++e) dko[(bh * S + j) * E + e] = TO(dk[e]);
  for (int e = 0; e < EV; ++e) dvo[(bh * S + j) * EV + e] = TO(dv[e]);
)cu";

void check_dims(const Tensor& q, const Tensor& v) {
  const int64_t E = q.sizes()[3], Ev = v.sizes()[3];
  VOLT_CHECK(E >= 1 && Ev >= 1 && E <= kMaxAttentionHeadDim && Ev <= kMaxAttentionHeadDim, "flash_attention",
             "on CUDA devices head_dim must lie in [1, " << kMaxAttentionHeadDim << "], got " << E << " and " << Ev);
}

cudaKernel_t kernel_for(const Tensor& q, const Tensor& v, AttentionKernel w) {
  const DType t = q.dtype();
  const int E = static_cast<int>(q.sizes()[3]), Ev = static_cast<int>(v.sizes()[3]);
  return cached_kernel(attention_name(t, E, Ev, w), q.device().index,
                       [&] { return attention_source(t, E, Ev, w); });
}

dim3 grid_over(int64_t rows, int64_t bh) {
  return dim3(static_cast<unsigned>((rows + kRows - 1) / kRows), static_cast<unsigned>(bh));
}

}  // namespace

std::string attention_name(DType t, int E, int Ev, AttentionKernel which) {
  return std::string("volt_flash_") + kind_name(which) + "_" + dtype_name(t) + "_e" + std::to_string(E) + "_v" +
         std::to_string(Ev);
}

std::string attention_source(DType t, int E, int Ev, AttentionKernel which) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64 || is_half(t), "flash_attention",
             "expected f32, f64, bf16 or f16, got " << dtype_name(t));
  std::ostringstream os;
  os << common(t, E, Ev) << "extern \"C\" __global__ void " << attention_name(t, E, Ev, which) << "(";
  const char* scalars = "long long L, long long S, T scale, int causal, double p, unsigned long long seed0, "
                        "unsigned long long offset0, const unsigned long long* rng_word";
  // In a captured CUDA graph (tensor/cuda/graph.h) the Philox seed and offset
  // are read from device memory when the kernel runs, offset0 relative to it.
  const char* rng =
      "\n  const unsigned long long seed = rng_word ? rng_word[0] : seed0;\n"
      "  const unsigned long long offset = (rng_word ? rng_word[1] : 0ull) + offset0;";
  switch (which) {
    case AttentionKernel::Forward:
      os << "const ST* q, const ST* k, const ST* v, ST* out, T* lse, " << scalars << ") {" << rng << kForwardBody;
      break;
    case AttentionKernel::BackwardQuery:
      os << "const ST* g, const ST* q, const ST* k, const ST* v, const ST* out, const T* lse, T* Dbuf, ST* dqo, "
         << scalars << ") {" << rng << kBackwardQueryBody;
      break;
    case AttentionKernel::BackwardKey:
      os << "const ST* g, const ST* q, const ST* k, const ST* v, const T* lse, const T* Dbuf, ST* dko, ST* dvo, "
         << scalars << ") {" << rng << kBackwardKeyBody;
      break;
  }
  os << "}\n#undef T\n#undef ST\n#undef LD\n#undef TO\n#undef E\n#undef EV\n#undef TILE\n#undef VEXP\n#undef VLOG\n#undef volt_keep\n#undef LOWEST\n";
  return os.str();
}

// The launch arguments every kernel ends with.
struct Scalars {
  long long L, S;
  double scale_f64;
  float scale_f32;
  int causal;
  double p;
  unsigned long long seed, offset;
  void* word;

  Scalars(const Tensor& q, const Tensor& k, const FlashParams& fp)
      : L(q.sizes()[2]), S(k.sizes()[2]), scale_f64(fp.scale), scale_f32(static_cast<float>(fp.scale)),
        causal(fp.causal ? 1 : 0), p(fp.dropout_p), seed(fp.seed), offset(fp.offset),
        word(fp.dropout_p > 0 ? rng_state_word() : nullptr) {}
  void* scale(DType t) { return t == DType::f64 ? static_cast<void*>(&scale_f64) : static_cast<void*>(&scale_f32); }
};

std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& fp) {
  check_dims(q, v);
  const Shape& s = q.sizes();
  Tensor out = Tensor::empty({s[0], s[1], s[2], v.sizes()[3]}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({s[0], s[1], s[2]}, flash_lse_dtype(q.dtype()), q.device());
  if (out.numel() == 0) return {out, lse};
  Scalars a(q, k, fp);
  void *qp = q.raw_data(), *kp = k.raw_data(), *vp = v.raw_data(), *op = out.raw_data(), *lp = lse.raw_data();
  void* params[] = {&qp, &kp, &vp, &op, &lp, &a.L, &a.S, a.scale(q.dtype()), &a.causal, &a.p, &a.seed, &a.offset,
                    &a.word};
  launch(kernel_for(q, v, AttentionKernel::Forward), q.device().index, grid_over(a.L, s[0] * s[1]), dim3(kRows),
         params);
  return {out, lse};
}

std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& fp) {
  check_dims(q, v);
  Tensor dq = Tensor::empty(q.sizes(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.sizes(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.sizes(), v.dtype(), v.device());
  Tensor D = Tensor::empty(lse.sizes(), flash_lse_dtype(q.dtype()), q.device());
  const int64_t bh = q.sizes()[0] * q.sizes()[1];
  if (bh == 0) return {dq, dk, dv};
  Scalars a(q, k, fp);
  if (a.S == 0 && dq.numel() > 0) fill(dq, 0.0);
  void *gp = grad_out.raw_data(), *qp = q.raw_data(), *kp = k.raw_data(), *vp = v.raw_data();
  void *op = out.raw_data(), *lp = lse.raw_data(), *Dp = D.raw_data();
  void *dqp = dq.raw_data(), *dkp = dk.raw_data(), *dvp = dv.raw_data();
  const int dev = q.device().index;
  if (a.L > 0 && a.S > 0) {
    void* pq[] = {&gp, &qp, &kp, &vp, &op, &lp, &Dp, &dqp, &a.L, &a.S, a.scale(q.dtype()),
                  &a.causal, &a.p, &a.seed, &a.offset, &a.word};
    launch(kernel_for(q, v, AttentionKernel::BackwardQuery), dev, grid_over(a.L, bh), dim3(kRows), pq);
  }
  if (a.S > 0) {
    void* pk[] = {&gp, &qp, &kp, &vp, &lp, &Dp, &dkp, &dvp, &a.L, &a.S, a.scale(q.dtype()),
                  &a.causal, &a.p, &a.seed, &a.offset, &a.word};
    launch(kernel_for(q, v, AttentionKernel::BackwardKey), dev, grid_over(a.S, bh), dim3(kRows), pk);
  }
  return {dq, dk, dv};
}

}  // namespace volt::cuda
