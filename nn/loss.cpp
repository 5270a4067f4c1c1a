#include <volt/nn/loss.h>
#include <volt/nn/regression_loss.h>

#include <volt/tensor/ops.h>

namespace volt::nn {

Tensor CrossEntropyLoss::forward(const Tensor&) {
  throw Error("CrossEntropyLoss: takes two inputs, (logits, target); called with one");
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) {
  VOLT_CHECK(logits.dim() == 2, "CrossEntropyLoss",
             "expected logits (N, C), got " << shape_str(logits.sizes()));
  VOLT_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), "CrossEntropyLoss",
             "expected target (" << logits.size(0) << "), got " << shape_str(target.sizes()));
  VOLT_CHECK(is_integral(target.dtype()), "CrossEntropyLoss",
             "target must hold class indices (an integer dtype), got "
                 << dtype_name(target.dtype()));
  return volt::cross_entropy(logits, target, options_);
}

Tensor MSELoss::forward(const Tensor&) { throw Error("MSELoss: takes two inputs, (input, target); called with one"); }
Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return volt::mse_loss(input, target, options_.reduction());
}

Tensor SmoothL1Loss::forward(const Tensor&) {
  throw Error("SmoothL1Loss: takes two inputs, (input, target); called with one");
}
Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return volt::smooth_l1_loss(input, target, options_.reduction(), options_.beta());
}

Tensor BCEWithLogitsLoss::forward(const Tensor&) {
  throw Error("BCEWithLogitsLoss: takes two inputs, (input, target); called with one");
}
Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return volt::binary_cross_entropy_with_logits(input, target, options_);
}

}  // namespace volt::nn
