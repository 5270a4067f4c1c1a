// The convolution prims on the CPU (convolution, convolution_grad_input,
// convolution_grad_weight): one product per image on volt's GEMM tiles
// (tensor/cpu/gemm.h), the images split over the threads.
//
// An image's im2col columns (C*kh*kw, OH*OW) are written straight into the
// tiles' packed panels, so they never exist as a matrix; the weight is packed
// once per call; the bias and the ReLU are applied to each tile of the output
// as it is finished, while it is in cache.  Everything an image needs fits in
// a core's L2 cache, and no thread waits for another within an image.
//
// Every output element is one chain of fused multiply-adds over k in
// ascending order (the tiles' rule), then + bias, then max(., 0): the forward
// and the input gradient equal, bit for bit, im2col + matmul (+ add, relu) and
// matmul + col2im.  The weight gradient sums the images in fixed groups (one
// chain per group, then the groups in order), so it does not depend on the
// number of threads either.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <volt/tensor/conv.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/cpu/window.h>

namespace volt {

namespace {

template <class T>
const cpu::GemmKernels<T>& kernels() {
  if constexpr (std::is_same_v<T, float>) return cpu::gemm_kernels_f32();
  else return cpu::gemm_kernels_f64();
}

// The most of k one packed block holds (as the GEMM's own blocking).
constexpr int64_t kDepth = 400;
// The weight gradient's images are summed in at most this many groups.
constexpr int64_t kWeightGroups = 16;

// [0, k) in blocks of near-equal size, at most kDepth each.
struct KBlocks {
  int64_t count, size;
  explicit KBlocks(int64_t k) : count((k + kDepth - 1) / kDepth), size(count ? (k + count - 1) / count : 0) {}
  int64_t begin(int64_t b) const { return b * size; }
  int64_t len(int64_t b, int64_t k) const { return std::min(size, k - b * size); }
};

struct Geo {
  int64_t n, c, h, w, o, oh, ow;
  Window2d win;
  int64_t kk() const { return win.kernel[0] * win.kernel[1]; }
  int64_t K() const { return c * kk(); }
  int64_t L() const { return oh * ow; }
  cpu::PlaneWindow plane() const { return {h, w, oh, ow, win}; }
};

// Per-thread scratch, reused from call to call.
template <class T>
std::vector<T>& scratch(int which) {
  static thread_local std::vector<T> bufs[3];
  return bufs[which];
}
template <class T>
T* scratch_at_least(int which, int64_t n) {
  std::vector<T>& v = scratch<T>(which);
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

// Row r = (ci, i, j) of one image's im2col columns.
template <class T>
void im2col_row(const T* x, const Geo& g, int64_t r, T* dst) {
  const int64_t ci = r / g.kk(), i = (r % g.kk()) / g.win.kernel[1], j = r % g.win.kernel[1];
  cpu::im2col_plane_row(x + ci * g.h * g.w, g.plane(), i, j, dst);
}

// Columns (K, L) of one image -> its plane gradient (C, H, W): each entry added
// into the element it was read from, in the order (i, j, oh, ow) per plane
// (col2im's order).
template <class T>
void col2im_image(const T* cols, const Geo& g, T* x) {
  for (int64_t ci = 0; ci < g.c; ++ci) cpu::col2im_plane(cols + ci * g.kk() * g.L(), g.plane(), x + ci * g.h * g.w);
}

// C (m, n; row stride ldc) (= or +=) Ap Bp for one k block of packed panels:
// column panels outer, so a B panel stays in L1 while the A panels pass.
// `finish(c, i, rows)` runs on each tile after the last block.
template <class T, class F>
void tiles(const cpu::GemmKernels<T>& ker, const T* ap, const T* bp, int64_t kc, int64_t m, int64_t n, T* c,
           int64_t ldc, bool accumulate, bool last, const F& finish) {
  const int MR = ker.mr, NR = ker.nr;
  for (int64_t j = 0; j < n; j += NR) {
    const int cols = int(std::min<int64_t>(NR, n - j));
    const T* b = bp + (j / NR) * NR * kc;
    for (int64_t i = 0; i < m; i += MR) {
      const int rows = int(std::min<int64_t>(MR, m - i));
      T* ct = c + i * ldc + j;
      ker.packed_tile(ap + (i / MR) * MR * kc, b, kc, ct, ldc, rows, cols, accumulate, nullptr, false);
      if (last) finish(ct, i, rows, cols);
    }
  }
}

int64_t panels(int64_t n, int r) { return (n + r - 1) / r; }

// The A operand of every k-block, packed once for the whole call: `rows` rows
// in panels of MR, block b's panels at b * panels(rows, MR) * MR * kb.size.
// pack(p0, kc, q, live, dst) writes panel q of the block that starts at p0.
template <class T, class Pack>
std::vector<T> pack_all_blocks(const KBlocks& kb, int64_t depth, int64_t rows, int MR, const Pack& pack) {
  const int64_t mp = panels(rows, MR);
  std::vector<T> ap(size_t(std::max<int64_t>(1, kb.count * mp * MR * kb.size)));
  for (int64_t b = 0; b < kb.count; ++b) {
    const int64_t p0 = kb.begin(b), kc = kb.len(b, depth);
    for (int64_t q = 0; q < mp; ++q)
      pack(p0, kc, q, std::min<int64_t>(MR, rows - q * MR), ap.data() + b * mp * MR * kb.size + q * MR * kc);
  }
  return ap;
}

// y (N, O, L) = W (O, K) cols_n (K, L) + bias, then max(., 0) if relu.
template <class T>
void forward(const T* x, const T* wt, const T* bias, bool relu, T* y, const Geo& g) {
  const cpu::GemmKernels<T>& ker = kernels<T>();
  const int MR = ker.mr, NR = ker.nr;
  const int64_t K = g.K(), L = g.L(), O = g.o;
  const KBlocks kb(K);
  const int64_t mp = panels(O, MR), np = panels(L, NR);
  // The weight, packed once.
  const std::vector<T> ap = pack_all_blocks<T>(kb, K, O, MR, [&](int64_t p0, int64_t kc, int64_t q, int64_t live, T* d) {
    ker.pack_rows(wt + q * MR * K + p0, live, kc, K, MR, d);
  });
  auto finish = [&](T* c, int64_t i, int rows, int cols) {
    for (int r = 0; r < rows; ++r) {
      T* row = c + r * L;
      if (bias) {
        const T bv = bias[i + r];
        for (int q = 0; q < cols; ++q) row[q] = row[q] + bv;
      }
      if (relu)
        for (int q = 0; q < cols; ++q) row[q] = row[q] <= T(0) ? T(0) : row[q];  // relu(NaN) = NaN
    }
  };
  cpu::parallel_tasks(g.n, [&](int64_t n) {
    const T* xn = x + n * g.c * g.h * g.w;
    T* yn = y + n * O * L;
    T* bp = scratch_at_least<T>(0, np * NR * kb.size);
    T* row = scratch_at_least<T>(1, L);
    for (int64_t b = 0; b < kb.count; ++b) {
      const int64_t p0 = kb.begin(b), kc = kb.len(b, K);
      // The columns' rows p0 .. p0 + kc, straight into B panels (k-major, NR wide).
      for (int64_t r = 0; r < kc; ++r) {
        im2col_row(xn, g, p0 + r, row);
        for (int64_t q = 0; q < np; ++q) {
          T* d = bp + q * NR * kc + r * NR;
          const int64_t live = std::min<int64_t>(NR, L - q * NR);
          std::memcpy(d, row + q * NR, sizeof(T) * live);
          std::fill(d + live, d + NR, T(0));
        }
      }
      tiles(ker, ap.data() + b * mp * MR * kb.size, bp, kc, O, L, yn, L, b > 0, b + 1 == kb.count, finish);
    }
  });
}

// gx_n = col2im(W^T (K, O) g_n (O, L)).
template <class T>
void grad_input(const T* gy, const T* wt, T* gx, const Geo& g) {
  const cpu::GemmKernels<T>& ker = kernels<T>();
  const int MR = ker.mr, NR = ker.nr;
  const int64_t K = g.K(), L = g.L(), O = g.o;
  const KBlocks kb(O);
  const int64_t mp = panels(K, MR), np = panels(L, NR);
  // W^T's panels: element (r, kk) = W[kk, r], rows contiguous in W's columns.
  const std::vector<T> ap = pack_all_blocks<T>(kb, O, K, MR, [&](int64_t p0, int64_t kc, int64_t q, int64_t live, T* d) {
    ker.pack_cols(wt + p0 * K + q * MR, live, kc, K, MR, d);
  });
  auto nothing = [](T*, int64_t, int, int) {};
  cpu::parallel_tasks(g.n, [&](int64_t n) {
    const T* gn = gy + n * O * L;
    T* cols = scratch_at_least<T>(2, K * L);
    T* bp = scratch_at_least<T>(0, np * NR * kb.size);
    if (kb.count == 0) std::fill(cols, cols + K * L, T(0));
    for (int64_t b = 0; b < kb.count; ++b) {
      const int64_t p0 = kb.begin(b), kc = kb.len(b, O);
      for (int64_t q = 0; q < np; ++q)
        ker.pack_cols(gn + p0 * L + q * NR, std::min<int64_t>(NR, L - q * NR), kc, L, NR, bp + q * NR * kc);
      tiles(ker, ap.data() + b * mp * MR * kb.size, bp, kc, K, L, cols, L, b > 0, false, nothing);
    }
    col2im_image(cols, g, gx + n * g.c * g.h * g.w);
  });
}

// gw (O, K) = sum over images of g_n (O, L) cols_n^T (L, K), in fixed groups.
template <class T>
void grad_weight(const T* gy, const T* x, T* gw, const Geo& g) {
  const cpu::GemmKernels<T>& ker = kernels<T>();
  const int MR = ker.mr, NR = ker.nr;
  const int64_t K = g.K(), L = g.L(), O = g.o;
  const int64_t groups = std::min(g.n, kWeightGroups);
  if (groups == 0) return std::fill(gw, gw + O * K, T(0));
  const KBlocks kb(L);
  const int64_t mp = panels(O, MR), np = panels(K, NR);
  std::vector<T> parts(size_t(groups * O * K));
  auto nothing = [](T*, int64_t, int, int) {};
  cpu::parallel_tasks(groups, [&](int64_t gi) {
    T* part = parts.data() + gi * O * K;
    T* cols = scratch_at_least<T>(2, K * L);
    T* bp = scratch_at_least<T>(0, np * NR * kb.size);
    T* ap = scratch_at_least<T>(1, mp * MR * kb.size);
    const int64_t n0 = gi * g.n / groups, n1 = (gi + 1) * g.n / groups;
    for (int64_t n = n0; n < n1; ++n) {
      const T* xn = x + n * g.c * g.h * g.w;
      const T* gn = gy + n * O * L;
      for (int64_t r = 0; r < K; ++r) im2col_row(xn, g, r, cols + r * L);
      for (int64_t b = 0; b < kb.count; ++b) {
        const int64_t p0 = kb.begin(b), kc = kb.len(b, L);
        for (int64_t q = 0; q < mp; ++q)
          ker.pack_rows(gn + q * MR * L + p0, std::min<int64_t>(MR, O - q * MR), kc, L, MR, ap + q * MR * kc);
        for (int64_t q = 0; q < np; ++q)
          ker.pack_rows(cols + q * NR * L + p0, std::min<int64_t>(NR, K - q * NR), kc, L, NR, bp + q * NR * kc);
        tiles(ker, ap, bp, kc, O, K, part, K, n > n0 || b > 0, false, nothing);
      }
    }
  });
  cpu::parallel_for(O * K, 4096, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      T s = parts[size_t(e)];
      for (int64_t gi = 1; gi < groups; ++gi) s += parts[size_t(gi * O * K + e)];
      gw[e] = s;
    }
  });
}

template <class T>
void run_typed(const OpCall& call, Tensor& out) {
  const Window2d win = Window2d::from_ints(call.attrs.ints);
  const Tensor a0 = call.args[0].tensor.contiguous(), a1 = call.args[1].tensor.contiguous();
  T* o = static_cast<T*>(out.raw_data());
  const T* p0 = static_cast<const T*>(a0.raw_data());
  const T* p1 = static_cast<const T*>(a1.raw_data());
  if (out.numel() == 0) return;
  switch (call.op) {
    case OpId::convolution: {  // (x, w[, b])
      const Geo g{a0.size(0), a0.size(1), a0.size(2), a0.size(3), a1.size(0), out.size(2), out.size(3), win};
      const Tensor b = call.args.size() == 3 ? call.args[2].tensor.contiguous() : Tensor();
      forward<T>(p0, p1, b.defined() ? static_cast<const T*>(b.raw_data()) : nullptr, call.attrs.flag, o, g);
      return;
    }
    case OpId::convolution_grad_input: {  // (g, w) -> (N, C, H, W)
      const Geo g{out.size(0), out.size(1), out.size(2), out.size(3), a1.size(0), a0.size(2), a0.size(3), win};
      grad_input<T>(p0, p1, o, g);
      return;
    }
    case OpId::convolution_grad_weight: {  // (g, x) -> (O, C, kh, kw)
      const Geo g{a1.size(0), a1.size(1), a1.size(2), a1.size(3), a0.size(1), a0.size(2), a0.size(3), win};
      grad_weight<T>(p0, p1, o, g);
      return;
    }
    default: VOLT_FAIL(op_name(call.op), "is not a convolution prim");
  }
}

}  // namespace

// Runs a convolution prim whose output is allocated (windows.cpp calls it).
void cpu_convolution(const OpCall& call, Tensor& out) {
  if (out.dtype() == DType::f64) run_typed<double>(call, out);
  else run_typed<float>(call, out);
}

}  // namespace volt
