// Convolution, pooling and flatten: the ops of an image model.
//
//   x: (N, C, H, W), weight: (O, C, kh, kw), bias: (O) or undefined
//   conv2d(x, w, b, {.stride = {1, 1}})          -> (N, O, OH, OW)
//   max_pool2d(x, {2, 2})                        -> (N, C, H / 2, W / 2)
//   flatten(y, 1)                                -> (N, C * OH * OW)
// with OH = (H + 2 * pad_h - dil_h * (kh - 1) - 1) / stride_h + 1 (and OW alike).
//
// conv2d is a composite over one prim, convolution (x, weight, bias), whose
// gradient prims are convolution_grad_input and convolution_grad_weight.  In
// parts, convolution is im2col (every kh x kw window unfolded into a column),
// one matmul with the weight as an (O, C * kh * kw) matrix, the bias added (and
// a ReLU where asked); convolution_by_parts runs exactly that with the window
// prims and matmul (the CUDA backend does; the CPU has one kernel per image,
// tensor/cpu/windows.cpp).  conv2d_relu(x, w, b) = relu(conv2d(x, w, b)) in one
// pass where no gradient is wanted (bias and ReLU applied as each tile of the
// product is stored), else as conv2d then relu.  max_pool2d is a prim with its own gradient
// prim, max_pool2d_backward, which sends each output's gradient to the first
// maximal element of its window (PyTorch's rule; a NaN counts as maximal).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt {

// A 2-D window: kernel size, stride, zero padding on both sides, dilation.
struct Window2d {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};

  // As Attrs::ints: {kh, kw, sh, sw, ph, pw, dh, dw}.
  std::vector<int64_t> ints() const;
  static Window2d from_ints(const std::vector<int64_t>& ints);
  // The output size along dim d (0: height, 1: width) for an input of size n;
  // fails, naming `op`, where the dilated kernel is larger than the padded input.
  int64_t out_size(int d, int64_t n, const char* op) const;
};

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;  // only 1
};

// x: (N, C, H, W), weight: (O, C, kh, kw), bias: (O) or undefined -> (N, O, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& o = {});
// relu(conv2d(x, weight, bias, o)): one kernel (the ReLU fused into the
// product's store) where no gradient is wanted, else conv2d then relu.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& o = {});
// x: (N, C, H, W) -> (N, C, OH, OW), the maximum of each window (padding counts
// as -inf).  stride {0, 0} (the default) means stride = kernel, as in PyTorch.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1});
// A square window, as LibTorch's max_pool2d(x, 2): stride 0 means stride = kernel_size.
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
// Dims start_dim..end_dim merged into one: (2, 3, 4, 5), 1 -> (2, 60).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// ---- the prims underneath ----
// x: (N, C, H, W) -> (N, C * kh * kw, OH * OW); row c * kh * kw + i * kw + j of
// column oh * OW + ow holds x[n, c, oh * sh - ph + i * dh, ow * sw - pw + j * dw]
// (0 outside the input).
Tensor im2col(const Tensor& x, const Window2d& w);
// The adjoint of im2col: cols (N, C * kh * kw, OH * OW) -> (N, C, H, W), each
// column entry added into the input element it was read from.
Tensor col2im(const Tensor& cols, const Window2d& w, int64_t height, int64_t width);
// The convolution prim: x (N, C, H, W), weight (O, C, kh, kw), bias (O) or
// undefined -> (N, O, OH, OW); relu: max(., 0) applied to the sum (with bias).
// The window's kernel must be the weight's (kh, kw).
Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w, bool relu = false);
// Its gradients: g (N, O, OH, OW) and the weight -> the gradient of x (N, C,
// height, width); g and x -> the gradient of the weight (O, C, kh, kw).
Tensor convolution_grad_input(const Tensor& g, const Tensor& weight, const Window2d& w, int64_t height, int64_t width);
Tensor convolution_grad_weight(const Tensor& g, const Tensor& x, const Window2d& w);
// Any of the three convolution prims computed by other ops (im2col, matmul,
// col2im, add, relu, sum) on the call's device; a backend without a kernel of
// its own runs this.
Tensor convolution_by_parts(const OpCall& call);
// g: the gradient of max_pool2d(x, w) -> the gradient of x.
Tensor max_pool2d_backward(const Tensor& g, const Tensor& x, const Window2d& w);

// The meta function of the window prims (tensor/meta.cpp calls it).
std::vector<TensorMeta> window_meta(const OpCall& call);
// conv2d's decomposition (tensor/composites.cpp calls it).
Tensor conv2d_decomposition(const OpCall& call);

}  // namespace volt
