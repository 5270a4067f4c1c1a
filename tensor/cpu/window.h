// The window walk of the CPU's im2col and col2im, one plane (one channel of one
// image) at a time: shared by the window prims (tensor/cpu/windows.cpp) and the
// convolution prims, which unfold an image straight into GEMM panels
// (tensor/cpu/convolution.cpp).  Every element is written in one fixed order,
// so the results are the same bits wherever the walk is used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <volt/tensor/conv.h>

namespace volt::cpu {

// A plane (h, w) and its output positions (oh, ow) under a window.
struct PlaneWindow {
  int64_t h, w, oh, ow;
  Window2d win;
  int64_t len() const { return oh * ow; }
};

// The range [lo, hi) of output positions o whose input position
// o * stride + off lies in [0, size).
inline void valid_range(int64_t out, int64_t size, int64_t stride, int64_t off, int64_t* lo, int64_t* hi) {
  const int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t h = size - off <= 0 ? 0 : (size - off + stride - 1) / stride;
  *lo = std::min(l, out);
  *hi = std::max(*lo, std::min(h, out));
}

// Row (i, j) of a plane's im2col columns: dst[oh * OW + ow] =
// xp[oh * sh - ph + i * dh, ow * sw - pw + j * dw] (0 outside the plane).
template <class T>
void im2col_plane_row(const T* xp, const PlaneWindow& g, int64_t i, int64_t j, T* dst) {
  const Window2d& k = g.win;
  const int64_t hoff = i * k.dilation[0] - k.padding[0], woff = j * k.dilation[1] - k.padding[1];
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  valid_range(g.oh, g.h, k.stride[0], hoff, &oh_lo, &oh_hi);
  valid_range(g.ow, g.w, k.stride[1], woff, &ow_lo, &ow_hi);
  std::fill(dst, dst + oh_lo * g.ow, T(0));
  for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
    T* d = dst + oh * g.ow;
    const T* src = xp + (oh * k.stride[0] + hoff) * g.w + woff;
    std::fill(d, d + ow_lo, T(0));
    if (k.stride[1] == 1) {
      std::memcpy(d + ow_lo, src + ow_lo, sizeof(T) * (ow_hi - ow_lo));
    } else {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow] = src[ow * k.stride[1]];
    }
    std::fill(d + ow_hi, d + g.ow, T(0));
  }
  std::fill(dst + oh_hi * g.ow, dst + g.len(), T(0));
}

// A plane's im2col columns cp (kh * kw, OH * OW) -> the plane xp (h, w): xp
// zeroed, then each entry added into the element it was read from, in the
// order (i, j, oh, ow).
template <class T>
void col2im_plane(const T* cp, const PlaneWindow& g, T* xp) {
  const Window2d& k = g.win;
  std::fill(xp, xp + g.h * g.w, T(0));
  for (int64_t i = 0; i < k.kernel[0]; ++i) {
    const int64_t hoff = i * k.dilation[0] - k.padding[0];
    int64_t oh_lo, oh_hi;
    valid_range(g.oh, g.h, k.stride[0], hoff, &oh_lo, &oh_hi);
    for (int64_t j = 0; j < k.kernel[1]; ++j) {
      const int64_t woff = j * k.dilation[1] - k.padding[1];
      int64_t ow_lo, ow_hi;
      valid_range(g.ow, g.w, k.stride[1], woff, &ow_lo, &ow_hi);
      const T* row = cp + (i * k.kernel[1] + j) * g.len();
      for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
        const T* r = row + oh * g.ow;
        T* dst = xp + (oh * k.stride[0] + hoff) * g.w + woff;
        if (k.stride[1] == 1) {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] += r[ow];
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * k.stride[1]] += r[ow];
        }
      }
    }
  }
}

}  // namespace volt::cpu
