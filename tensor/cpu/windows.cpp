// The window prims on the CPU: im2col, col2im, max_pool2d and its gradient
// (the convolution prims are tensor/cpu/convolution.cpp).
// Each works plane by plane (one (n, c) image channel at a time), the planes
// split over threads; every output element is written by one thread, in one
// fixed order, so results do not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <volt/tensor/conv.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/cpu/window.h>

namespace volt {

namespace {

using cpu::PlaneWindow;

// body(p) for every plane p, the planes split over volt's threads when the
// elements touched (`work`) are enough to pay for it.
template <class F>
void for_each_plane(int64_t planes, int64_t work, const F& body) {
  const int64_t grain = work > (1 << 15) ? 1 : std::max<int64_t>(planes, 1);
  cpu::parallel_for(planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) body(p);
  });
}

struct Geometry {
  int64_t n, c, h, w, oh, ow;
  Window2d win;
};

PlaneWindow plane_window(const Geometry& g) { return {g.h, g.w, g.oh, g.ow, g.win}; }

// x: (N, C, H, W) contiguous -> cols (N, C * kh * kw, OH * OW)
template <class T>
void im2col_kernel(const T* x, T* cols, const Geometry& g) {
  const Window2d& k = g.win;
  const PlaneWindow pw = plane_window(g);
  const int64_t planes = g.n * g.c, kk = k.kernel[0] * k.kernel[1], len = pw.len();
  for_each_plane(planes, planes * kk * len, [&](int64_t p) {
    for (int64_t i = 0; i < k.kernel[0]; ++i)
      for (int64_t j = 0; j < k.kernel[1]; ++j)
        im2col_plane_row(x + p * g.h * g.w, pw, i, j, cols + (p * kk + i * k.kernel[1] + j) * len);
  });
}

// cols (N, C * kh * kw, OH * OW) -> x (N, C, H, W): the sum of every column
// entry read from each input element, in the order (i, j, oh, ow).
template <class T>
void col2im_kernel(const T* cols, T* x, const Geometry& g) {
  const PlaneWindow pw = plane_window(g);
  const int64_t planes = g.n * g.c, kk = g.win.kernel[0] * g.win.kernel[1], len = pw.len();
  for_each_plane(planes, planes * kk * len,
                 [&](int64_t p) { col2im_plane(cols + p * kk * len, pw, x + p * g.h * g.w); });
}

// The position (in its plane) of the first maximal element of output (oh, ow)'s
// window, a NaN counting as maximal; -1 where the window holds no element.
template <class T>
inline int64_t window_argmax(const T* xp, const Geometry& g, int64_t oh, int64_t ow) {
  const Window2d& k = g.win;
  int64_t best = -1;
  T bv = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < k.kernel[0]; ++i) {
    const int64_t ih = oh * k.stride[0] - k.padding[0] + i * k.dilation[0];
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t j = 0; j < k.kernel[1]; ++j) {
      const int64_t iw = ow * k.stride[1] - k.padding[1] + j * k.dilation[1];
      if (iw < 0 || iw >= g.w) continue;
      const T v = xp[ih * g.w + iw];
      if (best < 0 || v > bv || std::isnan(v)) {
        best = ih * g.w + iw;
        bv = v;
        if (std::isnan(v)) return best;
      }
    }
  }
  return best;
}

// window_argmax's rule for a 2x2 window (a, b over c, d): the maximum and its
// position (0..3).  Without NaNs (one test, almost never taken) the strict
// comparisons run as max and conditional moves: a random image mispredicts
// every other branch of the plain rule.
template <class T>
inline T max4(T a, T b, T c, T d, int* at_out) {
  if (((a != a) | (b != b) | (c != c) | (d != d))) {  // the first NaN is the maximum
    const T v[4] = {a, b, c, d};
    int q = 0;
    while (v[q] == v[q]) ++q;
    *at_out = q;
    return v[q];
  }
  int at = 0;
  T m = a;
  at += int(b > m) * (1 - at);
  m = std::max(m, b);
  at += int(c > m) * (2 - at);
  m = std::max(m, c);
  at += int(d > m) * (3 - at);
  m = std::max(m, d);
  *at_out = at;
  return m;
}

// x (N, C, H, W) -> y (N, C, OH, OW)
template <class T>
void max_pool_kernel(const T* x, T* y, const Geometry& g) {
  const int64_t planes = g.n * g.c;
  const Window2d& k = g.win;
  const bool plain2 = k.kernel[0] == 2 && k.kernel[1] == 2 && k.stride[0] == 2 && k.stride[1] == 2 &&
                      k.padding[0] == 0 && k.padding[1] == 0 && k.dilation[0] == 1 && k.dilation[1] == 1;
  for_each_plane(planes, planes * g.oh * g.ow, [&](int64_t p) {
    const T* xp = x + p * g.h * g.w;
    T* yp = y + p * g.oh * g.ow;
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      if (plain2) {  // the common 2x2 pool: the same rule, without the general walk
        const T* r0 = xp + 2 * oh * g.w;
        const T* r1 = r0 + g.w;
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          int at;
          yp[oh * g.ow + ow] = max4(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &at);
        }
        continue;
      }
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t at = window_argmax(xp, g, oh, ow);
        yp[oh * g.ow + ow] = at < 0 ? -std::numeric_limits<T>::infinity() : xp[at];
      }
    }
  });
}

// keep ? v : +0, by masking v's bits (no branch to mispredict).
template <class T>
inline T keep_if(T v, bool keep) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits &= U(0) - U(keep);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// gy (N, C, OH, OW), x (N, C, H, W) -> gx (N, C, H, W)
template <class T>
void max_pool_backward_kernel(const T* gy, const T* x, T* gx, const Geometry& g) {
  const int64_t planes = g.n * g.c;
  const Window2d& k = g.win;
  const bool plain2 = k.kernel[0] == 2 && k.kernel[1] == 2 && k.stride[0] == 2 && k.stride[1] == 2 &&
                      k.padding[0] == 0 && k.padding[1] == 0 && k.dilation[0] == 1 && k.dilation[1] == 1;
  for_each_plane(planes, planes * g.h * g.w, [&](int64_t p) {
    const T* xp = x + p * g.h * g.w;
    const T* gp = gy + p * g.oh * g.ow;
    T* op = gx + p * g.h * g.w;
    if (plain2) {  // the common 2x2 pool: windows apart, every element written once
      if (g.h != 2 * g.oh || g.w != 2 * g.ow) std::fill(op, op + g.h * g.w, T(0));  // odd edges
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const T* r0 = xp + 2 * oh * g.w;
        const T* r1 = r0 + g.w;
        T* o0 = op + 2 * oh * g.w;
        T* o1 = o0 + g.w;
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t c = 2 * ow;
          int at;
          (void)max4(r0[c], r0[c + 1], r1[c], r1[c + 1], &at);
          const T gv = T(0) + gp[oh * g.ow + ow];  // as 0 + g: a -0 gradient gives +0
          o0[c] = keep_if(gv, at == 0);
          o0[c + 1] = keep_if(gv, at == 1);
          o1[c] = keep_if(gv, at == 2);
          o1[c + 1] = keep_if(gv, at == 3);
        }
      }
      return;
    }
    std::fill(op, op + g.h * g.w, T(0));
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t at = window_argmax(xp, g, oh, ow);
        if (at >= 0) op[at] += gp[oh * g.ow + ow];
      }
  });
}

template <class T>
void run_typed(const OpCall& call, Tensor& out) {
  const Window2d win = Window2d::from_ints(call.attrs.ints);
  const Tensor in = call.args.back().tensor.contiguous();
  T* o = static_cast<T*>(out.raw_data());
  const T* ip = static_cast<const T*>(in.raw_data());
  switch (call.op) {
    case OpId::im2col: {
      const Geometry g{in.size(0), in.size(1), in.size(2), in.size(3), win.out_size(0, in.size(2), "im2col"),
                       win.out_size(1, in.size(3), "im2col"), win};
      im2col_kernel<T>(ip, o, g);
      return;
    }
    case OpId::col2im: {
      const Geometry g{out.size(0), out.size(1), out.size(2), out.size(3), win.out_size(0, out.size(2), "col2im"),
                       win.out_size(1, out.size(3), "col2im"), win};
      col2im_kernel<T>(ip, o, g);
      return;
    }
    case OpId::max_pool2d:
    case OpId::max_pool2d_backward: {
      const Geometry g{in.size(0), in.size(1), in.size(2), in.size(3), win.out_size(0, in.size(2), "max_pool2d"),
                       win.out_size(1, in.size(3), "max_pool2d"), win};
      if (call.op == OpId::max_pool2d) return max_pool_kernel<T>(ip, o, g);
      const Tensor gy = call.args[0].tensor.contiguous();
      max_pool_backward_kernel<T>(static_cast<const T*>(gy.raw_data()), ip, o, g);
      return;
    }
    default: VOLT_FAIL(op_name(call.op), "is not a window op");
  }
}

}  // namespace

void cpu_convolution(const OpCall& call, Tensor& out);  // convolution.cpp

// Runs a window prim whose output is allocated (backend.cpp calls it).
void cpu_window(const OpCall& call, Tensor& out) {
  NoGradGuard no_grad;
  if (call.op == OpId::convolution || call.op == OpId::convolution_grad_input ||
      call.op == OpId::convolution_grad_weight)
    return cpu_convolution(call, out);
  if (out.dtype() == DType::f64) run_typed<double>(call, out);
  else run_typed<float>(call, out);
}

}  // namespace volt
