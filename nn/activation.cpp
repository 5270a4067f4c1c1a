#include <volt/nn/activation.h>

#include <volt/tensor/ops.h>

namespace volt::nn {

Tensor ReLU::forward(const Tensor& x) { return volt::relu(x); }

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  VOLT_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "p must be in [0, 1], got " << p);
}

Tensor Dropout::forward(const Tensor& x) { return volt::dropout(x, p_, is_training()); }

std::string Dropout::extra_repr() const {
  return "p=" + python_float_repr(p_) + ", inplace=False";
}

}  // namespace volt::nn
