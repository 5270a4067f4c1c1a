// volt::nn::Conv2d, MaxPool2d and Flatten: the layers of an image model, with
// PyTorch's printed forms.
//
//   volt::manual_seed(0);
//   auto conv = std::make_shared<volt::nn::Conv2d>(1, 32, 3);  // Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))
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

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  bool bias = true;
};

class Conv2d : public Module, public Holder<Conv2d> {
 public:
  // Empty until assigned (nn/holder.h): Conv2d layer{nullptr};
  explicit Conv2d(std::nullptr_t) : Module("Conv2d"), Holder<Conv2d>(nullptr), in_(0), out_(0), kernel_{0, 0} {}
  using Holder<Conv2d>::operator=;
  // weight (out, in, kh, kw) and bias (out) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  // fan_in = in * kh * kw, weight first (PyTorch's default: kaiming_uniform_ with
  // a = sqrt(5) works out to this bound).
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size, Conv2dOptions o = {});
  // A square kernel and stride: Conv2d(1, 32, 3, 1) as in PyTorch.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1);

  // x: (N, in, H, W) -> (N, out, OH, OW)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built without one

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  Conv2dOptions o_;
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
