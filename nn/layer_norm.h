// volt::nn::LayerNorm — normalises the last dims of its input to mean 0 and
// variance 1 (biased), then scales and shifts them by learned gains and biases.
//
//   volt::nn::LayerNorm ln(128);    // weight ones (128), bias zeros (128)
//   volt::Tensor y = ln(x);         // x: (B, T, 128) -> (B, T, 128)
//   std::cout << ln;                // LayerNorm((128,), eps=1e-05, elementwise_affine=True)
#pragma once
#include <cstdint>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>
#include <volt/nn/parameter_field.h>

namespace volt::nn {

// LibTorch's builder: LayerNorm(LayerNormOptions({768}).eps(1e-5).elementwise_affine(true)).
class LayerNormOptions {
 public:
  LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  LayerNormOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  LayerNormOptions& elementwise_affine(bool on) {
    elementwise_affine_ = on;
    return *this;
  }
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }

 private:
  Shape normalized_shape_;
  double eps_ = 1e-5;
  bool elementwise_affine_ = true;
};

class LayerNorm : public Module, public Holder<LayerNorm> {
 public:
  // Empty until assigned (nn/holder.h): LayerNorm ln{nullptr};
  explicit LayerNorm(std::nullptr_t) : Module("LayerNorm"), Holder<LayerNorm>(nullptr), eps_(0) {}
  using Holder<LayerNorm>::operator=;
  explicit LayerNorm(const LayerNormOptions& options)
      : LayerNorm(options.normalized_shape(), options.eps(), options.elementwise_affine()) {}
  // elementwise_affine = false: no parameters; bias = false: a gain only (GPT-2 without biases).
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}

  // x: (*, normalized_shape...) -> same shape
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  // Gains and biases (normalized_shape), undefined without elementwise_affine:
  // ln->weight or ln->weight() (nn/parameter_field.h)
  ParameterField weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};

}  // namespace volt::nn
