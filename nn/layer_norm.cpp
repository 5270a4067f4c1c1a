#include <volt/nn/layer_norm.h>

#include <volt/tensor/ops.h>

namespace volt::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool has_bias)
    : Module("LayerNorm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  VOLT_CHECK(!normalized_shape_.empty(), "LayerNorm", "normalized_shape must have at least one dim");
  for (int64_t d : normalized_shape_)
    VOLT_CHECK(d > 0, "LayerNorm", "normalized_shape must be positive, got " << shape_str(normalized_shape_));
  VOLT_CHECK(eps > 0, "LayerNorm", "eps must be positive, got " << eps);
  if (!elementwise_affine) return;
  weight = register_parameter("weight", Tensor::ones(normalized_shape_));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros(normalized_shape_));
}

Tensor LayerNorm::forward(const Tensor& x) {
  return volt::layer_norm(x, normalized_shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  // The size tuple as Python's repr prints it: "(128,)", "(4, 8)".
  std::string dims = "(";
  for (size_t i = 0; i < normalized_shape_.size(); ++i) dims += (i ? ", " : "") + std::to_string(normalized_shape_[i]);
  dims += normalized_shape_.size() == 1 ? ",)" : ")";
  return dims + ", eps=" + python_float_repr(eps_) + ", elementwise_affine=" + (weight.defined() ? "True" : "False");
}

}  // namespace volt::nn
