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
// Inner loops run over a key block's columns or over head_dim with unit
// stride and no reduction, so the compiler vectorises them: the key and value
// blocks are transposed once per block for the loops that would otherwise be
// dot products.
#include <volt/tensor/cpu/attention.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/random.h>

namespace volt::cpu {

namespace {

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

// s[c] = scale * q . k_c for the block's keys, -inf where the causal mask hides key j0 + c from row i.
template <class T>
void scores(const T* q, const T* kt, int64_t E, int64_t n, T scale, bool causal, int64_t i, int64_t j0, T* s) {
  for (int64_t c = 0; c < kBc; ++c) s[c] = T(0);
  for (int64_t e = 0; e < E; ++e) {
    const T qe = q[e];
    const T* ke = kt + e * kBc;
    for (int64_t c = 0; c < kBc; ++c) s[c] += qe * ke[c];
  }
  for (int64_t c = 0; c < n; ++c) s[c] *= scale;
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t c = causal ? std::max<int64_t>(0, i - j0 + 1) : n; c < n; ++c) s[c] = -inf;
}

// One forward task: query rows [i0, i1) of head bh.
template <class T>
void forward_rows(const T* Q, const T* K, const T* V, T* O, T* lse, const Dims& d, const FlashParams& p,
                  int64_t bh, int64_t i0, int64_t i1) {
  const T scale = static_cast<T>(p.scale);
  const int64_t rows = i1 - i0;
  std::vector<T> kt(d.E * kBc), s(kBc), z(kBc, T(1)), acc(rows * d.Ev, T(0));
  std::vector<T> m(rows, -std::numeric_limits<T>::infinity()), l(rows, T(0));
  const DropoutMask<T> drop(p, bh, d.L, d.S);
  const T* Qh = Q + bh * d.L * d.E;
  const T* Kh = K + bh * d.S * d.E;
  const T* Vh = V + bh * d.S * d.Ev;
  const int64_t key_end = p.causal ? std::min(d.S, i1) : d.S;  // row i sees keys j <= i
  for (int64_t j0 = 0; j0 < key_end; j0 += kBc) {
    const int64_t n = std::min(kBc, key_end - j0);
    transpose_block(Kh + j0 * d.E, n, d.E, kt.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      if (p.causal && j0 > i) continue;  // every key of the block is in this row's future
      scores(Qh + i * d.E, kt.data(), d.E, n, scale, p.causal, i, j0, s.data());
      T mx = m[r];
      for (int64_t c = 0; c < n; ++c) mx = std::max(mx, s[c]);
      const T alpha = std::exp(m[r] - mx);  // 0 on the first block (m = -inf)
      T sum = 0;
      for (int64_t c = 0; c < n; ++c) {
        s[c] = std::exp(s[c] - mx);
        sum += s[c];
      }
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      if (drop.on) drop.row(i, j0, n, z.data());
      T* o = acc.data() + r * d.Ev;
      for (int64_t e = 0; e < d.Ev; ++e) o[e] *= alpha;
      for (int64_t c = 0; c < n; ++c) {
        const T w = s[c] * z[c];
        const T* vc = Vh + (j0 + c) * d.Ev;
        for (int64_t e = 0; e < d.Ev; ++e) o[e] += w * vc[e];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    T* out = O + (bh * d.L + i) * d.Ev;
    const T inv = l[r] > 0 ? T(1) / l[r] : T(0);
    for (int64_t e = 0; e < d.Ev; ++e) out[e] = acc[r * d.Ev + e] * inv;
    lse[bh * d.L + i] = m[r] + std::log(l[r]);
  }
}

template <class T>
struct BackwardArgs {
  const T *dO, *Q, *K, *V, *O, *lse;
  T *dQ, *dK, *dV;
};

// One backward task: every gradient of head bh.
template <class T>
void backward_head(const BackwardArgs<T>& a, const Dims& d, const FlashParams& p, int64_t bh) {
  const T scale = static_cast<T>(p.scale);
  const T* Qh = a.Q + bh * d.L * d.E;
  const T* Kh = a.K + bh * d.S * d.E;
  const T* Vh = a.V + bh * d.S * d.Ev;
  const T* dOh = a.dO + bh * d.L * d.Ev;
  const T* lse = a.lse + bh * d.L;
  T* dQh = a.dQ + bh * d.L * d.E;
  T* dKh = a.dK + bh * d.S * d.E;
  T* dVh = a.dV + bh * d.S * d.Ev;
  std::fill(dQh, dQh + d.L * d.E, T(0));
  std::fill(dKh, dKh + d.S * d.E, T(0));
  std::fill(dVh, dVh + d.S * d.Ev, T(0));
  std::vector<T> D(d.L), kt(d.E * kBc), vt(d.Ev * kBc), s(kBc), z(kBc, T(1)), dp(kBc);
  for (int64_t i = 0; i < d.L; ++i) {  // D = rowsum(dO o O)
    const T* o = a.O + (bh * d.L + i) * d.Ev;
    T sum = 0;
    for (int64_t e = 0; e < d.Ev; ++e) sum += dOh[i * d.Ev + e] * o[e];
    D[i] = sum;
  }
  const DropoutMask<T> drop(p, bh, d.L, d.S);
  for (int64_t j0 = 0; j0 < d.S; j0 += kBc) {
    const int64_t n = std::min(kBc, d.S - j0);
    transpose_block(Kh + j0 * d.E, n, d.E, kt.data());
    transpose_block(Vh + j0 * d.Ev, n, d.Ev, vt.data());
    for (int64_t i = p.causal ? j0 : 0; i < d.L; ++i) {
      const T* q = Qh + i * d.E;
      const T* g = dOh + i * d.Ev;
      scores(q, kt.data(), d.E, n, scale, p.causal, i, j0, s.data());
      for (int64_t c = 0; c < n; ++c) s[c] = std::exp(s[c] - lse[i]);  // P; 0 where masked
      if (drop.on) drop.row(i, j0, n, z.data());
      for (int64_t c = 0; c < n; ++c) {  // dV += (P o Z)^T dO
        const T w = s[c] * z[c];
        T* dv = dVh + (j0 + c) * d.Ev;
        for (int64_t e = 0; e < d.Ev; ++e) dv[e] += w * g[e];
      }
      for (int64_t c = 0; c < kBc; ++c) dp[c] = T(0);
      for (int64_t e = 0; e < d.Ev; ++e) {  // dP = dO V^T
        const T ge = g[e];
        const T* ve = vt.data() + e * kBc;
        for (int64_t c = 0; c < kBc; ++c) dp[c] += ge * ve[c];
      }
      for (int64_t c = 0; c < n; ++c) dp[c] = s[c] * (dp[c] * z[c] - D[i]) * scale;  // dS, scaled
      T* dq = dQh + i * d.E;
      for (int64_t c = 0; c < n; ++c) {
        const T w = dp[c];
        const T* kc = Kh + (j0 + c) * d.E;
        T* dk = dKh + (j0 + c) * d.E;
        for (int64_t e = 0; e < d.E; ++e) {
          dq[e] += w * kc[e];
          dk[e] += w * q[e];
        }
      }
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
    forward_rows<T>(Q, K, V, O, Lse, d, p, bh, i0, std::min(d.L, i0 + kBr));
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
  parallel_tasks(d.BH, [&](int64_t bh) { backward_head<T>(a, d, p, bh); });
  return {dq, dk, dv};
}

}  // namespace

std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p) {
  if (q.dtype() == DType::f64) return forward_typed<double>(q, k, v, p);
  return forward_typed<float>(q, k, v, p);
}

std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p) {
  if (q.dtype() == DType::f64) return backward_typed<double>(grad_out, q, k, v, out, lse, p);
  return backward_typed<float>(grad_out, q, k, v, out, lse, p);
}

}  // namespace volt::cpu
