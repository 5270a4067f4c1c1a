#include <volt/nn/conv.h>

#include <cmath>

#include <volt/tensor/ops.h>

namespace volt::nn {

namespace {

Tensor uniform_init(const Shape& shape, double bound) {
  NoGradGuard no_grad;
  return Tensor::rand(shape) * (2 * bound) + (-bound);
}

std::string pair(const std::array<int64_t, 2>& p) {
  std::string s = "(";
  s += std::to_string(p[0]);
  s += ", ";
  s += std::to_string(p[1]);
  return s + ")";
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size, Conv2dArgs o)
    : Module("Conv2d"), in_(in_channels), out_(out_channels), kernel_(kernel_size), o_(o) {
  VOLT_CHECK(in_channels > 0 && out_channels > 0, "Conv2d",
             "channels must be positive, got in_channels=" << in_channels << ", out_channels=" << out_channels);
  VOLT_CHECK(kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d", "kernel_size must be positive, got " << pair(kernel_size));
  VOLT_CHECK(o.stride[0] > 0 && o.stride[1] > 0 && o.padding[0] >= 0 && o.padding[1] >= 0 && o.dilation[0] > 0 &&
                 o.dilation[1] > 0,
             "Conv2d",
             "expected positive stride and dilation and padding >= 0, got stride=" << pair(o.stride) << ", padding="
                 << pair(o.padding) << ", dilation=" << pair(o.dilation));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size[0] * kernel_size[1]));
  weight_ = register_parameter("weight", uniform_init({out_channels, in_channels, kernel_size[0], kernel_size[1]}, bound));
  if (o.bias) bias_ = register_parameter("bias", uniform_init({out_channels}, bound));
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride)
    : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, Conv2dArgs{{stride, stride}}) {}

Conv2d::Conv2d(const Conv2dOptions& o) : Conv2d(o.in_channels(), o.out_channels(), o.kernel_size(), o.args()) {}

Tensor Conv2d::forward(const Tensor& x) {
  return volt::conv2d(x, weight_, bias_, volt::Conv2dOptions{o_.stride, o_.padding, o_.dilation, 1});
}

// PyTorch's form: "1, 32, kernel_size=(3, 3), stride=(1, 1)", then padding,
// dilation and bias only where they differ from the defaults.
std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair(kernel_) +
                  ", stride=" + pair(o_.stride);
  if (o_.padding != std::array<int64_t, 2>{0, 0}) s += ", padding=" + pair(o_.padding);
  if (o_.dilation != std::array<int64_t, 2>{1, 1}) s += ", dilation=" + pair(o_.dilation);
  if (!o_.bias) s += ", bias=False";
  return s;
}

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation)
    : MaxPool2d(std::array<int64_t, 2>{kernel_size, kernel_size}, {stride, stride}, {padding, padding},
                {dilation, dilation}) {
  square_ = true;
}

MaxPool2d::MaxPool2d(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                     std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation)
    : Module("MaxPool2d"), square_(false) {
  if (stride[0] == 0 && stride[1] == 0) stride = kernel_size;
  win_ = Window2d{kernel_size, stride, padding, dilation};
  for (int d = 0; d < 2; ++d)
    VOLT_CHECK(kernel_size[d] > 0 && stride[d] > 0 && padding[d] >= 0 && dilation[d] > 0, "MaxPool2d",
               "expected positive kernel_size, stride and dilation and padding >= 0, got kernel_size="
                   << pair(kernel_size) << ", stride=" << pair(stride) << ", padding=" << pair(padding)
                   << ", dilation=" << pair(dilation));
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return volt::max_pool2d(x, win_.kernel, win_.stride, win_.padding, win_.dilation);
}

std::string MaxPool2d::extra_repr() const {
  auto f = [&](const std::array<int64_t, 2>& p) { return square_ ? std::to_string(p[0]) : pair(p); };
  return "kernel_size=" + f(win_.kernel) + ", stride=" + f(win_.stride) + ", padding=" + f(win_.padding) +
         ", dilation=" + f(win_.dilation) + ", ceil_mode=False";
}

}  // namespace volt::nn
