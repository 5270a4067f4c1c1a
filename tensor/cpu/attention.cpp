// Attention without the (L, S) matrix (FlashAttention's algorithm, on the CPU).
//
// Forward: each task takes one (batch, head) and a block of kBr query rows and
// walks the keys in blocks of kBc, keeping per row the running max m and the
// running sum l of exp(score - m) (the online softmax): a new block with a
// larger max rescales what was summed so far by exp(m_old - m_new).  The
// output row is divided by l at the end, and lse = m + log(l) is kept for
// backward.  Causal: key blocks that start after the block's last row are
// never visited.
//
// Backward: each task takes one (batch, head) (so dq, dk and dv have one
// writer) and recomputes each score from q, k and lse: P = exp(S - lse).
//   dV += (P o Z)^T dO,  dP = (dO V^T) o Z,  D = rowsum(dO o O),
//   dS = P o (dP - D),   dQ += dS K scale,   dK += dS^T Q scale
// where Z is dropout's keep-and-rescale factor (1 without dropout).
//
// Both directions work on tiles: a block of kBr query rows against a block of
// kBc keys.  Each product (S = Q K^T, O += P V, dP = dO V^T, dQ += dS K,
// dK += dS^T Q, dV += (P o Z)^T dO) is one call of the register-blocked tile
// product of attention_tiles.h.  The key and value blocks are transposed once
// per block so that every product reads its right-hand side row by row; the
// left-hand sides dS^T and (P o Z)^T are read in place, an element at a time.
// Between the products, the per-row softmax steps (max, exp, sum) run a vector
// at a time; exp of f32 is the vectorised polynomial of attention_tiles.h,
// f64 keeps the library's exp.
#include <volt/tensor/cpu/attention.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <volt/tensor/cpu/attention_tiles.h>
#include <volt/tensor/cpu/convert_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace volt::cpu {

namespace {

namespace tiles = attention_tiles;

constexpr int64_t kBr = 32;  // query rows per forward task
constexpr int64_t kBc = 64;  // keys per block

struct Dims {
  int64_t BH, L, S, E, Ev;
};

Dims dims_of(const Tensor& q, const Tensor& v) {
  const Shape& s = q.sizes();
  return {s[0] * s[1], s[2], v.sizes()[2], s[3], v.sizes()[3]};
}

// Dropout's factor for element (bh, i, j): 1/keep where kept, 0 where dropped,
// from the same Philox draw as the decomposition's `uniform` + `lt`.
template <class T>
struct DropoutMask {
  bool on = false;
  uint64_t seed = 0, base = 0;  // base: counter of (bh, 0, 0)
  int64_t S = 0, L = 0;
  T keep = 1, inv_keep = 1;

  DropoutMask(const FlashParams& p, int64_t bh, int64_t L_, int64_t S_) : on(p.dropout_p > 0), S(S_), L(L_) {
    if (!on) return;
    seed = p.seed;
    base = p.offset + static_cast<uint64_t>(bh) * static_cast<uint64_t>(L * S);
    keep = static_cast<T>(1.0 - p.dropout_p);
    inv_keep = static_cast<T>(1.0 - p.dropout_p > 0 ? 1.0 / (1.0 - p.dropout_p) : 0.0);
  }
  // z[c] for row i, keys j0 .. j0 + n
  void row(int64_t i, int64_t j0, int64_t n, T* z) const {
    const uint64_t first = static_cast<uint64_t>(i * S + j0);
    for (int64_t c = 0; c < n; ++c) {
      T u;
      if constexpr (sizeof(T) == 4)
        u = philox_uniform(seed, base, first + c);
      else
        u = philox_uniform_f64(seed, base, first + c);
      z[c] = u < keep ? inv_keep : T(0);
    }
  }
};

// dst (n, cols) -> (cols, kBc): the block's columns become rows.
template <class T>
void transpose_block(const T* src, int64_t n, int64_t cols, T* dst) {
  for (int64_t c = 0; c < n; ++c)
    for (int64_t e = 0; e < cols; ++e) dst[e * kBc + c] = src[c * cols + e];
  for (int64_t c = n; c < kBc; ++c)
    for (int64_t e = 0; e < cols; ++e) dst[e * kBc + c] = T(0);
}

// Row i's raw dot products s[c] (c < n) become scale * s[c], -inf where the causal mask hides key j0 + c.
template <class T>
void scale_and_mask(T* s, int64_t n, T scale, bool causal, int64_t i, int64_t j0) {
  for (int64_t c = 0; c < n; ++c) s[c] *= scale;
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t c = causal ? std::max<int64_t>(0, i - j0 + 1) : n; c < n; ++c) s[c] = -inf;
}

// The largest of s[0, n), with one running max per vector lane.
template <class T>
T row_max(const T* s, int64_t n, T init) {
  constexpr int64_t W = tiles::kWidth<T>;
  tiles::V<T> mv = tiles::splat(init);
  int64_t c = 0;
  for (; c + W <= n; c += W) {
    const tiles::V<T> x = tiles::load(s + c);
    mv = x > mv ? x : mv;
  }
  T mx = init;
  for (int64_t w = 0; w < W; ++w) mx = std::max(mx, mv[w]);
  for (; c < n; ++c) mx = std::max(mx, s[c]);
  return mx;
}

// The sum of s[0, n), with one running sum per vector lane.
template <class T>
T row_sum(const T* s, int64_t n) {
  constexpr int64_t W = tiles::kWidth<T>;
  tiles::V<T> sv = tiles::splat(T(0));
  int64_t c = 0;
  for (; c + W <= n; c += W) sv += tiles::load(s + c);
  T sum = 0;
  for (int64_t w = 0; w < W; ++w) sum += sv[w];
  for (; c < n; ++c) sum += s[c];
  return sum;
}

// Scratch of a forward task: the transposed key block and the score tile of
// its kBr rows, one kBc-wide row each (rows past the block's keys unused).
template <class T>
struct ForwardScratch {
  std::vector<T> kt, s, z, acc, m, l;
  ForwardScratch(const Dims& d, int64_t rows)
      : kt(d.E * kBc), s(kBr * kBc), z(kBc, T(1)), acc(rows * d.Ev, T(0)),
        m(rows, -std::numeric_limits<T>::infinity()), l(rows, T(0)) {}
};

// One forward task: query rows [i0, i1) of head bh.  Per key block: the score
// tile S = Q K^T of all the rows at once, then per row the online softmax
// (turning S's row into P o Z in place), then acc += (P o Z) V as one tile product.
// Qh, Kh, Vh, Oh and lseh are head bh's slices (bh numbers the dropout draws).
template <class T>
void forward_rows(const T* Qh, const T* Kh, const T* Vh, T* Oh, T* lseh, const Dims& d, const FlashParams& p,
                  int64_t bh, int64_t i0, int64_t i1) {
  const T scale = static_cast<T>(p.scale);
  const int64_t rows = i1 - i0;
  ForwardScratch<T> w(d, rows);
  const DropoutMask<T> drop(p, bh, d.L, d.S);
  const int64_t key_end = p.causal ? std::min(d.S, i1) : d.S;  // row i sees keys j <= i
  for (int64_t j0 = 0; j0 < key_end; j0 += kBc) {
    const int64_t n = std::min(kBc, key_end - j0);
    // Rows before j0 see none of the block's keys (causal): they start at r0.
    const int64_t r0 = p.causal ? std::clamp<int64_t>(j0 - i0, 0, rows) : 0;
    transpose_block(Kh + j0 * d.E, n, d.E, w.kt.data());
    T* S = w.s.data() + r0 * kBc;
    std::fill(S, w.s.data() + rows * kBc, T(0));
    tiles::gemm_acc(Qh + (i0 + r0) * d.E, d.E, w.kt.data(), kBc, S, kBc, rows - r0, d.E, kBc);
    for (int64_t r = r0; r < rows; ++r) {
      const int64_t i = i0 + r;
      T* s = w.s.data() + r * kBc;
      scale_and_mask(s, n, scale, p.causal, i, j0);
      const T mx = row_max(s, n, w.m[r]);
      const T alpha = tiles::exp_one(w.m[r] - mx);  // 0 on the first block (m = -inf)
      tiles::exp_shifted(s, n, mx);
      w.l[r] = w.l[r] * alpha + row_sum(s, n);
      w.m[r] = mx;
      if (drop.on) {
        drop.row(i, j0, n, w.z.data());
        for (int64_t c = 0; c < n; ++c) s[c] *= w.z[c];
      }
      T* o = w.acc.data() + r * d.Ev;
      for (int64_t e = 0; e < d.Ev; ++e) o[e] *= alpha;
    }
    tiles::gemm_acc(S, kBc, Vh + j0 * d.Ev, d.Ev, w.acc.data() + r0 * d.Ev, d.Ev, rows - r0, n, d.Ev);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    T* out = Oh + i * d.Ev;
    const T inv = w.l[r] > 0 ? T(1) / w.l[r] : T(0);
    for (int64_t e = 0; e < d.Ev; ++e) out[e] = w.acc[r * d.Ev + e] * inv;
    lseh[i] = w.m[r] + std::log(w.l[r]);
  }
}

// The operands of one head: dO, Q, O, dQ of (L, .), K, V, dK, dV of (S, .), lse of (L).
template <class T>
struct BackwardArgs {
  const T *dO, *Q, *K, *V, *O, *lse;
  T *dQ, *dK, *dV;

  // Head bh's slices of whole (B, H, ., .) operands.
  BackwardArgs head(const Dims& d, int64_t bh) const {
    const int64_t q = bh * d.L * d.E, kv = bh * d.S * d.E, v = bh * d.S * d.Ev, o = bh * d.L * d.Ev;
    return {dO + o, Q + q, K + kv, V + v, O + o, lse + bh * d.L, dQ + q, dK + kv, dV + v};
  }
};

// Scratch of a backward task: the transposed key and value blocks, and for a
// block of kBr query rows the tiles P (then dS), dP and P o Z.
template <class T>
struct BackwardScratch {
  std::vector<T> D, kt, vt, s, dp, pz, z;
  explicit BackwardScratch(const Dims& d)
      : D(d.L), kt(d.E * kBc), vt(d.Ev * kBc), s(kBr * kBc), dp(kBr * kBc), pz(kBr * kBc), z(kBc, T(1)) {}
};

// P, dP and dS for query rows [i0, i0 + rows) against the key block at j0 (n keys).
template <class T>
void backward_tiles(const BackwardArgs<T>& a, const Dims& d, const FlashParams& p, const DropoutMask<T>& drop,
                    int64_t j0, int64_t n, int64_t i0, int64_t rows, BackwardScratch<T>& w) {
  const T scale = static_cast<T>(p.scale);
  const T* lse = a.lse;
  std::fill(w.s.begin(), w.s.end(), T(0));
  std::fill(w.dp.begin(), w.dp.end(), T(0));
  tiles::gemm_acc(a.Q + i0 * d.E, d.E, w.kt.data(), kBc, w.s.data(), kBc, rows, d.E, kBc);
  tiles::gemm_acc(a.dO + i0 * d.Ev, d.Ev, w.vt.data(), kBc, w.dp.data(), kBc, rows, d.Ev, kBc);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    T* s = w.s.data() + r * kBc;
    T* dp = w.dp.data() + r * kBc;
    scale_and_mask(s, n, scale, p.causal, i, j0);
    tiles::exp_shifted(s, n, lse[i]);  // P; 0 where masked
    if (drop.on) drop.row(i, j0, n, w.z.data());
    T* pz = w.pz.data() + r * kBc;
    for (int64_t c = 0; c < n; ++c) {
      pz[c] = s[c] * w.z[c];
      s[c] = s[c] * (dp[c] * w.z[c] - w.D[i]) * scale;  // dS, scaled
    }
  }
}

// D = rowsum(dO o O) of rows [0, L), O read in its own type (a 16-bit O
// widened exactly as each element is read: the f32 kernel's sums on widened O).
template <class T, class TO>
void row_dots(const T* dO, const TO* O, int64_t L, int64_t Ev, T* D) {
  for (int64_t i = 0; i < L; ++i) {
    const TO* o = O + i * Ev;
    T sum = 0;
    for (int64_t e = 0; e < Ev; ++e) {
      if constexpr (std::is_same_v<T, TO>)
        sum += dO[i * Ev + e] * o[e];
      else
        sum += dO[i * Ev + e] * o[e].to_float();
    }
    D[i] = sum;
  }
}

// One backward task: every gradient of head bh (`a`: its slices).  Per key
// block and block of kBr query rows: the tiles of backward_tiles, then
//   dV_blk += (P o Z)^T dO_rows,  dQ_rows += dS K_blk,  dK_blk += dS^T Q_rows.
// D: rowsum(dO o O) given by the caller, or null: computed here from a.O.
template <class T>
void backward_head(const BackwardArgs<T>& a, const Dims& d, const FlashParams& p, int64_t bh,
                   const T* D = nullptr) {
  const T *Qh = a.Q, *Kh = a.K, *Vh = a.V, *dOh = a.dO;
  T *dQh = a.dQ, *dKh = a.dK, *dVh = a.dV;
  std::fill(dQh, dQh + d.L * d.E, T(0));
  std::fill(dKh, dKh + d.S * d.E, T(0));
  std::fill(dVh, dVh + d.S * d.Ev, T(0));
  BackwardScratch<T> w(d);
  if (D)
    std::copy(D, D + d.L, w.D.begin());
  else
    row_dots(dOh, a.O, d.L, d.Ev, w.D.data());
  const DropoutMask<T> drop(p, bh, d.L, d.S);
  for (int64_t j0 = 0; j0 < d.S; j0 += kBc) {
    const int64_t n = std::min(kBc, d.S - j0);
    transpose_block(Kh + j0 * d.E, n, d.E, w.kt.data());
    transpose_block(Vh + j0 * d.Ev, n, d.Ev, w.vt.data());
    for (int64_t i0 = p.causal ? j0 : 0; i0 < d.L; i0 += kBr) {
      const int64_t rows = std::min(kBr, d.L - i0);
      backward_tiles(a, d, p, drop, j0, n, i0, rows, w);
      tiles::gemm_acc_t(w.pz.data(), kBc, dOh + i0 * d.Ev, d.Ev, dVh + j0 * d.Ev, d.Ev, n, rows, d.Ev);
      tiles::gemm_acc(w.s.data(), kBc, Kh + j0 * d.E, d.E, dQh + i0 * d.E, d.E, rows, n, d.E);
      tiles::gemm_acc_t(w.s.data(), kBc, Qh + i0 * d.E, d.E, dKh + j0 * d.E, d.E, n, rows, d.E);
    }
  }
}

template <class T>
std::vector<Tensor> forward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p) {
  const Dims d = dims_of(q, v);
  const Shape& qs = q.sizes();
  Tensor out = Tensor::empty({qs[0], qs[1], d.L, d.Ev}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({qs[0], qs[1], d.L}, q.dtype(), q.device());
  const T *Q = q.data_ptr<T>(), *K = k.data_ptr<T>(), *V = v.data_ptr<T>();
  T *O = out.data_ptr<T>(), *Lse = lse.data_ptr<T>();
  const int64_t blocks = (d.L + kBr - 1) / kBr;
  parallel_tasks(d.BH * blocks, [&](int64_t t) {
    const int64_t bh = t / blocks, i0 = (t % blocks) * kBr;
    forward_rows<T>(Q + bh * d.L * d.E, K + bh * d.S * d.E, V + bh * d.S * d.Ev, O + bh * d.L * d.Ev, Lse + bh * d.L,
                    d, p, bh, i0, std::min(d.L, i0 + kBr));
  });
  return {out, lse};
}

template <class T>
std::vector<Tensor> backward_typed(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const FlashParams& p) {
  const Dims d = dims_of(q, v);
  Tensor dq = Tensor::empty(q.sizes(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.sizes(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.sizes(), v.dtype(), v.device());
  const BackwardArgs<T> a{g.data_ptr<T>(),  q.data_ptr<T>(),  k.data_ptr<T>(),  v.data_ptr<T>(), out.data_ptr<T>(),
                          lse.data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(), dv.data_ptr<T>()};
  parallel_tasks(d.BH, [&](int64_t bh) { backward_head<T>(a.head(d, bh), d, p, bh); });
  return {dq, dk, dv};
}

// bf16 and f16 operands: a task widens its head's slices into f32 buffers of
// its thread (O(L E) per head, against the O(L S E) of the tile products, and
// no f32 copy of a whole tensor), the f32 kernels above run on them, and out,
// dq, dk and dv are rounded once into the operands' type: the same values, bit
// for bit, as the f32 kernels on widened tensors.  lse stays f32: rounded to 8
// bits it would put an error of up to 2^-9 into every weight that backward
// recomputes from it.
template <class H>
void widen(const H* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<H, BF16>)
    bf16_to_f32(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i].to_float();
}
template <class H>
void narrow(const float* src, H* dst, int64_t n) {
  if constexpr (std::is_same_v<H, BF16>)
    f32_to_bf16(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = H::from_float(src[i]);
}

// A thread's f32 buffers for one head, grown as needed and kept between calls.
// o: the forward's output; in backward, D = rowsum(dO o O) of the head.
struct HeadBuffers {
  std::vector<float> q, k, v, o, g, dq, dk, dv;
};
float* sized(std::vector<float>& b, int64_t n) {
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}
HeadBuffers& head_buffers() {
  static thread_local HeadBuffers b;
  return b;
}

template <class H>
const H* half_ptr(const Tensor& t) { return static_cast<const H*>(t.raw_data()); }

// One task a head (its row blocks in turn): q, k, v widened, out rounded.
template <class H>
std::vector<Tensor> forward_half(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p) {
  const Dims d = dims_of(q, v);
  const Shape& qs = q.sizes();
  Tensor out = Tensor::empty({qs[0], qs[1], d.L, d.Ev}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({qs[0], qs[1], d.L}, DType::f32, q.device());
  const H *Q = half_ptr<H>(q), *K = half_ptr<H>(k), *V = half_ptr<H>(v);
  H* O = static_cast<H*>(out.raw_data());
  float* Lse = lse.data_ptr<float>();
  parallel_tasks(d.BH, [&](int64_t bh) {
    HeadBuffers& b = head_buffers();
    float *qf = sized(b.q, d.L * d.E), *kf = sized(b.k, d.S * d.E), *vf = sized(b.v, d.S * d.Ev);
    float* of = sized(b.o, d.L * d.Ev);
    widen(Q + bh * d.L * d.E, qf, d.L * d.E);
    widen(K + bh * d.S * d.E, kf, d.S * d.E);
    widen(V + bh * d.S * d.Ev, vf, d.S * d.Ev);
    for (int64_t i0 = 0; i0 < d.L; i0 += kBr)
      forward_rows<float>(qf, kf, vf, of, Lse + bh * d.L, d, p, bh, i0, std::min(d.L, i0 + kBr));
    narrow(of, O + bh * d.L * d.Ev, d.L * d.Ev);
  });
  return {out, lse};
}

// One task a head: the output's gradient, q, k and v widened, out read where it
// lies for D = rowsum(dO o O) (its only use), dq, dk and dv rounded.
template <class H>
std::vector<Tensor> backward_half(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const FlashParams& p) {
  const Dims d = dims_of(q, v);
  Tensor dq = Tensor::empty(q.sizes(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.sizes(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.sizes(), v.dtype(), v.device());
  const H *G = half_ptr<H>(g), *Q = half_ptr<H>(q), *K = half_ptr<H>(k), *V = half_ptr<H>(v), *O = half_ptr<H>(out);
  H *dQ = static_cast<H*>(dq.raw_data()), *dK = static_cast<H*>(dk.raw_data()), *dV = static_cast<H*>(dv.raw_data());
  const float* Lse = lse.data_ptr<float>();
  parallel_tasks(d.BH, [&](int64_t bh) {
    HeadBuffers& b = head_buffers();
    const int64_t nq = d.L * d.E, nk = d.S * d.E, nv = d.S * d.Ev, no = d.L * d.Ev;
    float *gf = sized(b.g, no), *qf = sized(b.q, nq), *kf = sized(b.k, nk), *vf = sized(b.v, nv);
    float *dqf = sized(b.dq, nq), *dkf = sized(b.dk, nk), *dvf = sized(b.dv, nv), *D = sized(b.o, d.L);
    widen(G + bh * no, gf, no);
    widen(Q + bh * nq, qf, nq);
    widen(K + bh * nk, kf, nk);
    widen(V + bh * nv, vf, nv);
    row_dots(gf, O + bh * no, d.L, d.Ev, D);
    backward_head<float>({gf, qf, kf, vf, nullptr, Lse + bh * d.L, dqf, dkf, dvf}, d, p, bh, D);
    narrow(dqf, dQ + bh * nq, nq);
    narrow(dkf, dK + bh * nk, nk);
    narrow(dvf, dV + bh * nv, nv);
  });
  return {dq, dk, dv};
}

}  // namespace

std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p) {
  if (q.dtype() == DType::f64) return forward_typed<double>(q, k, v, p);
  if (q.dtype() == DType::bf16) return forward_half<BF16>(q, k, v, p);
  if (q.dtype() == DType::f16) return forward_half<F16>(q, k, v, p);
  return forward_typed<float>(q, k, v, p);
}

std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p) {
  if (q.dtype() == DType::f64) return backward_typed<double>(grad_out, q, k, v, out, lse, p);
  if (q.dtype() == DType::bf16) return backward_half<BF16>(grad_out, q, k, v, out, lse, p);
  if (q.dtype() == DType::f16) return backward_half<F16>(grad_out, q, k, v, out, lse, p);
  return backward_typed<float>(grad_out, q, k, v, out, lse, p);
}

}  // namespace volt::cpu
