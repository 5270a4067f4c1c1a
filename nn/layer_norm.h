// volt::nn::LayerNorm — normalises the last dims of its input to mean 0 and
// variance 1 (biased), then scales and shifts them by learned gains and biases.
//
//   volt::nn::LayerNorm ln(128);    // weight ones (128), bias zeros (128)
//   volt::Tensor y = ln(x);         // x: (B, T, 128) -> (B, T, 128)
//   std::cout << ln;                // LayerNorm((128,), eps=1e-05, elementwise_affine=True)
#pragma once
#include <cstdint>

#include <volt/nn/module.h>

namespace volt::nn {

class LayerNorm : public Module {
 public:
  // elementwise_affine = false: no parameters; bias = false: a gain only (GPT-2 without biases).
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}

  // x: (*, normalized_shape...) -> same shape
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  const Tensor& weight() const { return weight_; }  // undefined without elementwise_affine
  const Tensor& bias() const { return bias_; }

 private:
  Shape normalized_shape_;
  double eps_;
  Tensor weight_, bias_;
};

}  // namespace volt::nn
