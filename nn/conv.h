// volt::nn::Conv2d, MaxPool2d and Flatten: the layers of an image model, with
// PyTorch's printed forms.
//
//   volt::manual_seed(0);
//   auto conv = std::make_shared<volt::nn::Conv2d>(1, 32, 3);  // Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))
//   volt::nn::Conv2d down(volt::nn::Conv2dOptions(32, 32, 3).stride(2).padding(1));  // LibTorch's spelling
//   volt::nn::Conv2d same(32, 32, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}});   // the same layer
//   volt::nn::MaxPool2d pool(2);     // MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
//   volt::nn::Flatten flat;          // Flatten(start_dim=1, end_dim=-1)
//   volt::Tensor y = flat(pool((*conv)(x)));  // x: (B, 1, 28, 28) -> (B, 32 * 13 * 13)
#pragma once
#include <array>
#include <cstdint>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>
#include <volt/tensor/conv.h>

namespace volt::nn {

// A Conv2d's arguments after the channels and kernel, as designated
// initialisers: Conv2d(3, 8, {3, 3}, {.stride = {2, 2}, .bias = false}).
struct Conv2dArgs {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  bool bias = true;
};

// LibTorch's torch::nn::Conv2dOptions: channels and kernel in the constructor,
// the rest chained, with LibTorch's defaults (stride 1, padding 0, dilation 1,
// a bias).  A single number stands for both dims.
//   nn::Conv2d conv(nn::Conv2dOptions(1, 10, 5).stride(2).bias(false));
class Conv2dOptions {
 public:
  Conv2dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv2dOptions(in_channels, out_channels, {kernel_size, kernel_size}) {}
  Conv2dOptions(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}

  Conv2dOptions& stride(int64_t s) { return stride({s, s}); }
  Conv2dOptions& stride(std::array<int64_t, 2> s) { args_.stride = s; return *this; }
  Conv2dOptions& padding(int64_t p) { return padding({p, p}); }
  Conv2dOptions& padding(std::array<int64_t, 2> p) { args_.padding = p; return *this; }
  Conv2dOptions& dilation(int64_t d) { return dilation({d, d}); }
  Conv2dOptions& dilation(std::array<int64_t, 2> d) { args_.dilation = d; return *this; }
  Conv2dOptions& bias(bool on) { args_.bias = on; return *this; }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  const std::array<int64_t, 2>& kernel_size() const { return kernel_; }
  const std::array<int64_t, 2>& stride() const { return args_.stride; }
  const std::array<int64_t, 2>& padding() const { return args_.padding; }
  const std::array<int64_t, 2>& dilation() const { return args_.dilation; }
  bool bias() const { return args_.bias; }
  const Conv2dArgs& args() const { return args_; }

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  Conv2dArgs args_;
};

class Conv2d : public Module, public Holder<Conv2d> {
 public:
  // Empty until assigned (nn/holder.h): Conv2d layer{nullptr};
  explicit Conv2d(std::nullptr_t) : Module("Conv2d"), Holder<Conv2d>(nullptr), in_(0), out_(0), kernel_{0, 0} {}
  using Holder<Conv2d>::operator=;
  // weight (out, in, kh, kw) and bias (out) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  // fan_in = in * kh * kw, weight first (PyTorch's default: kaiming_uniform_ with
  // a = sqrt(5) works out to this bound).
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size, Conv2dArgs o = {});
  // A square kernel and stride: Conv2d(1, 32, 3, 1) as in PyTorch.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1);
  // LibTorch's Conv2d(Conv2dOptions(1, 32, 3).stride(2)).
  explicit Conv2d(const Conv2dOptions& o);

  // x: (N, in, H, W) -> (N, out, OH, OW)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built without one

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  Conv2dArgs o_;
  Tensor weight_, bias_;
};

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size, as PyTorch's stride=None.
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1);
  MaxPool2d(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
            std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1});
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, OH, OW)
  std::string extra_repr() const override;

 private:
  Window2d win_;
  bool square_;  // built from single numbers: printed as numbers, not pairs
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return volt::flatten(x, start_, end_); }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_);
  }

 private:
  int64_t start_, end_;
};

}  // namespace volt::nn
