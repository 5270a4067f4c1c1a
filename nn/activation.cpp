#include <volt/nn/activation.h>

#include <volt/tensor/ops.h>

namespace volt::nn {

Tensor ReLU::forward(const Tensor& x) { return volt::relu(x); }

GELU::GELU(std::string approximate) : Module("GELU"), approximate_(std::move(approximate)) {
  VOLT_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU",
             "approximate must be 'none' or 'tanh', got '" << approximate_ << "'");
}

Tensor GELU::forward(const Tensor& x) { return volt::gelu(x, approximate_); }

std::string GELU::extra_repr() const { return "approximate='" + approximate_ + "'"; }

Tensor Softmax::forward(const Tensor& x) { return volt::softmax(x, dim_); }

std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim_); }

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  VOLT_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "p must be in [0, 1], got " << p);
}

Tensor Dropout::forward(const Tensor& x) { return volt::dropout(x, p_, is_training()); }

std::string Dropout::extra_repr() const {
  return "p=" + python_float_repr(p_) + ", inplace=False";
}

}  // namespace volt::nn
