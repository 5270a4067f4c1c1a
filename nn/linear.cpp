#include <volt/nn/linear.h>

#include <cmath>

#include <volt/tensor/ops.h>

namespace volt::nn {

namespace {

// U(low, high) as PyTorch's uniform_ computes it: low + (high - low) * u.
Tensor uniform_init(const Shape& shape, double low, double high) {
  NoGradGuard no_grad;
  return Tensor::rand(shape) * (high - low) + low;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  VOLT_CHECK(in_features > 0 && out_features > 0, "Linear",
             "features must be positive, got in_features=" << in_features
                                                           << ", out_features=" << out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform_init({out_features, in_features}, -bound, bound));
  if (has_bias) bias = register_parameter("bias", uniform_init({out_features}, -bound, bound));
}

Tensor Linear::forward(const Tensor& x) { return volt::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) +
         ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.defined() ? "True" : "False");
}

}  // namespace volt::nn
