// conv2d (composite), im2col / col2im / max_pool2d (prims): ops, meta, decomposition.
#include <volt/tensor/conv.h>

#include <volt/tensor/ops.h>

namespace volt {

std::vector<int64_t> Window2d::ints() const {
  return {kernel[0], kernel[1], stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
}

Window2d Window2d::from_ints(const std::vector<int64_t>& v) {
  VOLT_CHECK(v.size() >= 8, "window", "expected 8 window attributes, got " << v.size());
  return {{v[0], v[1]}, {v[2], v[3]}, {v[4], v[5]}, {v[6], v[7]}};
}

int64_t Window2d::out_size(int d, int64_t n, const char* op) const {
  // The dilated kernel and the padded input, refused where they overflow.
  int64_t span = 0, padded = 0;
  const bool overflow = __builtin_mul_overflow(dilation[d], kernel[d] - 1, &span) ||
                        __builtin_add_overflow(span, int64_t{1}, &span) ||
                        __builtin_mul_overflow(padding[d], int64_t{2}, &padded) ||
                        __builtin_add_overflow(padded, n, &padded);
  VOLT_CHECK(!overflow, op,
             "the window overflows 64 bits along the " << (d == 0 ? "height" : "width") << " (kernel " << kernel[d]
                                                       << ", dilation " << dilation[d] << ", padding " << padding[d]
                                                       << ", input " << n << ")");
  VOLT_CHECK(span <= padded, op,
             "the kernel (" << kernel[d] << (dilation[d] > 1 ? ", dilated to " + std::to_string(span) : std::string())
                            << ") is larger than the padded input (" << n << " + 2 * " << padding[d] << " = "
                            << padded << ") along the " << (d == 0 ? "height" : "width"));
  return (padded - span) / stride[d] + 1;
}

namespace {

void check_window(const Window2d& w, const char* op) {
  for (int d = 0; d < 2; ++d) {
    VOLT_CHECK(w.kernel[d] > 0, op, "kernel size must be positive, got (" << w.kernel[0] << ", " << w.kernel[1] << ")");
    VOLT_CHECK(w.stride[d] > 0, op, "stride must be positive, got (" << w.stride[0] << ", " << w.stride[1] << ")");
    VOLT_CHECK(w.padding[d] >= 0, op,
               "padding must be >= 0, got (" << w.padding[0] << ", " << w.padding[1] << ")");
    VOLT_CHECK(w.dilation[d] > 0, op,
               "dilation must be positive, got (" << w.dilation[0] << ", " << w.dilation[1] << ")");
  }
}

void check_image(const Tensor& x, const char* op, const char* what) {
  VOLT_CHECK(x.defined(), op, "got an undefined " << what);
  VOLT_CHECK(x.dim() == 4, op, "expected a 4-D " << what << " (N, C, H, W), got " << x.meta_str());
  VOLT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, op,
             "expected an f32 or f64 " << what << ", got " << x.meta_str());
}

Tensor call1(OpId op, std::vector<Value> args, std::vector<int64_t> ints) {
  Attrs a;
  a.ints = std::move(ints);
  return dispatch1(OpCall{op, std::move(args), std::move(a)});
}

}  // namespace

namespace {

// The convolution prims' operands: checked, and the output's metadata.
std::vector<TensorMeta> convolution_meta(const OpCall& call, const Window2d& w) {
  const char* op = op_name(call.op);
  const std::vector<Value>& a = call.args;
  const bool fwd = call.op == OpId::convolution;
  VOLT_CHECK(a.size() == 2 || (fwd && a.size() == 3), op,
             "expected " << (fwd ? "input, weight and optional bias" : "2 tensor arguments") << ", got "
                         << a.size() << " arguments");
  for (const Value& v : a) VOLT_CHECK(v.is_tensor, op, "expected tensor arguments, got a scalar");
  const Tensor& first = a[0].tensor;
  check_image(first, op, fwd ? "input" : "gradient");
  for (const Value& v : a)
    VOLT_CHECK(v.tensor.defined() && v.tensor.dtype() == first.dtype() && v.tensor.device() == first.device(), op,
               "expected every operand " << dtype_name(first.dtype()) << " on " << first.device().str() << ", got "
                                         << (v.tensor.defined() ? v.tensor.meta_str() : std::string("undefined")));
  switch (call.op) {
    case OpId::convolution: {
      const Tensor& x = a[0].tensor;
      const Tensor& wt = a[1].tensor;
      VOLT_CHECK(wt.dim() == 4 && wt.size(2) == w.kernel[0] && wt.size(3) == w.kernel[1] && wt.size(1) == x.size(1),
                 op, "expected a weight (O, " << x.size(1) << ", " << w.kernel[0] << ", " << w.kernel[1]
                                              << ") for input " << x.meta_str() << ", got " << wt.meta_str());
      if (a.size() == 3)
        VOLT_CHECK(a[2].tensor.dim() == 1 && a[2].tensor.size(0) == wt.size(0), op,
                   "expected a bias (" << wt.size(0) << "), got " << a[2].tensor.meta_str());
      const int64_t oh = w.out_size(0, x.size(2), op), ow = w.out_size(1, x.size(3), op);
      return {{{x.size(0), wt.size(0), oh, ow}, x.dtype(), x.device()}};
    }
    case OpId::convolution_grad_input: {
      VOLT_CHECK(call.attrs.ints.size() == 10, op, "expected the window and the input's (H, W)");
      const Tensor& g = a[0].tensor;
      const Tensor& wt = a[1].tensor;
      const int64_t h = call.attrs.ints[8], wd = call.attrs.ints[9];
      const int64_t oh = w.out_size(0, h, op), ow = w.out_size(1, wd, op);
      VOLT_CHECK(wt.dim() == 4 && wt.size(2) == w.kernel[0] && wt.size(3) == w.kernel[1] && wt.size(0) == g.size(1) &&
                     g.size(2) == oh && g.size(3) == ow,
                 op, "gradient " << g.meta_str() << " and weight " << wt.meta_str() << " do not fit a " << w.kernel[0]
                                 << "x" << w.kernel[1] << " window over " << h << "x" << wd);
      return {{{g.size(0), wt.size(1), h, wd}, g.dtype(), g.device()}};
    }
    default: {  // convolution_grad_weight
      const Tensor& g = a[0].tensor;
      const Tensor& x = a[1].tensor;
      check_image(x, op, "input");
      const int64_t oh = w.out_size(0, x.size(2), op), ow = w.out_size(1, x.size(3), op);
      VOLT_CHECK(g.size(0) == x.size(0) && g.size(2) == oh && g.size(3) == ow, op,
                 "gradient " << g.meta_str() << " does not fit input " << x.meta_str() << " under a " << w.kernel[0]
                             << "x" << w.kernel[1] << " window (expected (" << x.size(0) << ", O, " << oh << ", "
                             << ow << "))");
      return {{{g.size(1), x.size(1), w.kernel[0], w.kernel[1]}, g.dtype(), g.device()}};
    }
  }
}

}  // namespace

std::vector<TensorMeta> window_meta(const OpCall& call) {
  const char* op = op_name(call.op);
  if (call.op == OpId::convolution || call.op == OpId::convolution_grad_input ||
      call.op == OpId::convolution_grad_weight) {
    const Window2d w = Window2d::from_ints(call.attrs.ints);
    check_window(w, op);
    return convolution_meta(call, w);
  }
  const size_t nargs = call.op == OpId::max_pool2d_backward ? 2 : 1;
  VOLT_CHECK(call.args.size() == nargs, op, "expected " << nargs << " tensor arguments, got " << call.args.size());
  for (const Value& v : call.args) VOLT_CHECK(v.is_tensor, op, "expected tensor arguments, got a scalar");
  const Window2d w = Window2d::from_ints(call.attrs.ints);
  check_window(w, op);
  const Tensor& x = call.args.back().tensor;
  switch (call.op) {
    case OpId::im2col: {
      check_image(x, op, "input");
      const int64_t oh = w.out_size(0, x.size(2), op), ow = w.out_size(1, x.size(3), op);
      return {{{x.size(0), x.size(1) * w.kernel[0] * w.kernel[1], oh * ow}, x.dtype(), x.device()}};
    }
    case OpId::col2im: {
      VOLT_CHECK(call.attrs.ints.size() == 10, op, "expected the window and the output's (H, W)");
      VOLT_CHECK(x.dim() == 3 && (x.dtype() == DType::f32 || x.dtype() == DType::f64), op,
                 "expected f32 or f64 columns (N, C * kh * kw, L), got " << x.meta_str());
      const int64_t kk = w.kernel[0] * w.kernel[1];
      const int64_t h = call.attrs.ints[8], wd = call.attrs.ints[9];
      const int64_t oh = w.out_size(0, h, op), ow = w.out_size(1, wd, op);
      VOLT_CHECK(x.size(1) % kk == 0 && x.size(2) == oh * ow, op,
                 "columns " << shape_str(x.sizes()) << " do not fit a " << w.kernel[0] << "x" << w.kernel[1]
                            << " window over " << h << "x" << wd << " (expected (N, C * " << kk << ", " << oh * ow
                            << "))");
      return {{{x.size(0), x.size(1) / kk, h, wd}, x.dtype(), x.device()}};
    }
    case OpId::max_pool2d:
    case OpId::max_pool2d_backward: {
      check_image(x, op, "input");
      for (int d = 0; d < 2; ++d)
        VOLT_CHECK(w.padding[d] * 2 <= w.kernel[d], op,
                   "padding should be at most half the kernel size, got kernel (" << w.kernel[0] << ", " << w.kernel[1]
                                                                                  << ") and padding (" << w.padding[0]
                                                                                  << ", " << w.padding[1] << ")");
      const int64_t oh = w.out_size(0, x.size(2), op), ow = w.out_size(1, x.size(3), op);
      Shape out{x.size(0), x.size(1), oh, ow};
      if (call.op == OpId::max_pool2d) return {{out, x.dtype(), x.device()}};
      const Tensor& g = call.args[0].tensor;
      VOLT_CHECK(g.sizes() == out && g.dtype() == x.dtype() && g.device() == x.device(), op,
                 "expected a gradient " << dtype_name(x.dtype()) << shape_str(out) << " on " << x.device().str()
                                        << ", got " << g.meta_str());
      return {{x.sizes(), x.dtype(), x.device()}};
    }
    default: VOLT_FAIL(op, "is not a window op");
  }
}

Tensor im2col(const Tensor& x, const Window2d& w) { return call1(OpId::im2col, {x}, w.ints()); }

Tensor col2im(const Tensor& cols, const Window2d& w, int64_t height, int64_t width) {
  std::vector<int64_t> ints = w.ints();
  ints.push_back(height);
  ints.push_back(width);
  return call1(OpId::col2im, {cols}, std::move(ints));
}

Tensor max_pool2d_backward(const Tensor& g, const Tensor& x, const Window2d& w) {
  return call1(OpId::max_pool2d_backward, {g, x}, w.ints());
}

Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding) {
  return max_pool2d(x, {kernel_size, kernel_size}, {stride, stride}, {padding, padding});
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation) {
  VOLT_CHECK(x.defined(), "max_pool2d", "got an undefined input");
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  return call1(OpId::max_pool2d, {x}, Window2d{kernel, stride, padding, dilation}.ints());
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  VOLT_CHECK(o.groups == 1, "conv2d", "only groups=1 is supported, got groups=" << o.groups);
  std::vector<Value> args{x, weight};
  if (bias.defined()) args.emplace_back(bias);
  return call1(OpId::conv2d, std::move(args),
               {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]});
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  bool grad = false;
  for (const Tensor* t : {&x, &weight, &bias}) grad = grad || (t->defined() && t->requires_grad());
  if (grad && grad_enabled()) return relu(conv2d(x, weight, bias, o));
  VOLT_CHECK(o.groups == 1, "conv2d_relu", "only groups=1 is supported, got groups=" << o.groups);
  std::vector<Value> args{x, weight};
  if (bias.defined()) args.emplace_back(bias);
  Attrs a;
  a.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  a.flag = true;  // the ReLU, passed on to the convolution prim
  return dispatch1(OpCall{OpId::conv2d, std::move(args), std::move(a)});
}

Tensor conv2d_decomposition(const OpCall& call) {
  const char* op = "conv2d";
  VOLT_CHECK(call.args.size() == 2 || call.args.size() == 3, op, "expected input, weight and optional bias");
  for (const Value& v : call.args) VOLT_CHECK(v.is_tensor, op, "expected tensor arguments, got a scalar");
  const Tensor& x = call.args[0].tensor;
  const Tensor& w = call.args[1].tensor;
  check_image(x, op, "input");
  VOLT_CHECK(w.defined() && w.dim() == 4, op,
             "expected a 4-D weight (out_channels, in_channels, kh, kw), got "
                 << (w.defined() ? w.meta_str() : std::string("an undefined tensor")));
  VOLT_CHECK(w.dtype() == x.dtype(), op, "input " << x.meta_str() << " and weight " << w.meta_str()
                                                 << " must have one dtype");
  VOLT_CHECK(x.size(1) == w.size(1), op,
             "input has " << x.size(1) << " channels " << shape_str(x.sizes()) << ", the weight expects "
                          << w.size(1) << " " << shape_str(w.sizes()));
  const std::vector<int64_t>& a = call.attrs.ints;
  VOLT_CHECK(a.size() == 6, op, "expected stride, padding and dilation");
  const Window2d win{{w.size(2), w.size(3)}, {a[0], a[1]}, {a[2], a[3]}, {a[4], a[5]}};
  check_window(win, op);
  if (call.args.size() == 3) {
    const Tensor& b = call.args[2].tensor;
    VOLT_CHECK(b.defined() && b.dim() == 1 && b.size(0) == w.size(0) && b.dtype() == w.dtype(), op,
               "bias must be " << dtype_name(w.dtype()) << "[" << w.size(0) << "], got "
                               << (b.defined() ? b.meta_str() : std::string("an undefined tensor")));
  }
  (void)win.out_size(0, x.size(2), op), (void)win.out_size(1, x.size(3), op);
  return convolution(x, w, call.args.size() == 3 ? call.args[2].tensor : Tensor(), win, call.attrs.flag);
}

Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w, bool relu) {
  std::vector<Value> args{x, weight};
  if (bias.defined()) args.emplace_back(bias);
  Attrs a;
  a.ints = w.ints();
  a.flag = relu;
  return dispatch1(OpCall{OpId::convolution, std::move(args), std::move(a)});
}

Tensor convolution_grad_input(const Tensor& g, const Tensor& weight, const Window2d& w, int64_t height,
                              int64_t width) {
  std::vector<int64_t> ints = w.ints();
  ints.push_back(height);
  ints.push_back(width);
  return call1(OpId::convolution_grad_input, {g, weight}, std::move(ints));
}

Tensor convolution_grad_weight(const Tensor& g, const Tensor& x, const Window2d& w) {
  return call1(OpId::convolution_grad_weight, {g, x}, w.ints());
}

Tensor convolution_by_parts(const OpCall& call) {
  NoGradGuard no_grad;
  const Window2d win = Window2d::from_ints(call.attrs.ints);
  const Tensor& a0 = call.args[0].tensor;
  const Tensor& a1 = call.args[1].tensor;
  switch (call.op) {
    case OpId::convolution: {
      // (O, C*kh*kw) @ (N, C*kh*kw, OH*OW) -> (N, O, OH*OW): already channels first.
      const int64_t o = a1.size(0), oh = win.out_size(0, a0.size(2), "convolution"),
                    ow = win.out_size(1, a0.size(3), "convolution");
      Tensor y = matmul(reshape(a1, {o, a1.numel() / std::max<int64_t>(o, 1)}), im2col(a0, win));
      if (call.args.size() == 3) y = add(y, reshape(call.args[2].tensor, {o, 1}));
      if (call.attrs.flag) y = relu(y);
      return reshape(y, {a0.size(0), o, oh, ow});
    }
    case OpId::convolution_grad_input: {
      // g (N, O, L), weight^T (C*kh*kw, O) -> columns (N, C*kh*kw, L) -> col2im.
      const int64_t o = a1.size(0);
      Tensor wt = reshape(a1, {o, a1.numel() / std::max<int64_t>(o, 1)}).t();
      Tensor cols = matmul(wt, reshape(a0, {a0.size(0), o, a0.size(2) * a0.size(3)}));
      return col2im(cols, win, call.attrs.ints[8], call.attrs.ints[9]);
    }
    case OpId::convolution_grad_weight: {
      // sum over the batch of g (N, O, L) @ columns^T (N, L, C*kh*kw).
      const int64_t n = a0.size(0), o = a0.size(1);
      Tensor cols = im2col(a1, win);
      Tensor gw = sum(matmul(reshape(a0, {n, o, a0.size(2) * a0.size(3)}), cols.transpose(1, 2)), {0});
      return reshape(gw, {o, a1.size(1), win.kernel[0], win.kernel[1]});
    }
    default: VOLT_FAIL(op_name(call.op), "is not a convolution prim");
  }
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  VOLT_CHECK(x.defined(), "flatten", "got an undefined tensor");
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  const int64_t s = start_dim < 0 ? start_dim + nd : start_dim, e = end_dim < 0 ? end_dim + nd : end_dim;
  VOLT_CHECK(s >= 0 && s < nd && e >= 0 && e < nd, "flatten",
             "dims (" << start_dim << ", " << end_dim << ") out of range for " << x.meta_str());
  VOLT_CHECK(s <= e, "flatten", "start_dim " << start_dim << " comes after end_dim " << end_dim);
  if (x.dim() == 0) return reshape(x, {1});
  Shape out(x.sizes().begin(), x.sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.size(d);
  out.push_back(merged);
  out.insert(out.end(), x.sizes().begin() + e + 1, x.sizes().end());
  if (out == x.sizes()) return x;
  return reshape(x, out);
}

}  // namespace volt
