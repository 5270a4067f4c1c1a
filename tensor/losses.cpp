// mse_loss, smooth_l1_loss and binary_cross_entropy_with_logits as
// compositions of elementwise ops (tensor/losses.h).
#include <volt/tensor/losses.h>

#include <string>

#include <volt/tensor/ops.h>
#include <volt/tensor/shape.h>

namespace volt {

namespace {

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  VOLT_CHECK(input.defined() && target.defined(), op, "expected defined input and target tensors");
  VOLT_CHECK(input.sizes() == target.sizes(), op,
             "expected input and target of one shape, got " << shape_str(input.sizes()) << " and "
                                                            << shape_str(target.sizes()));
  VOLT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op,
             "expected floating input and target, got " << dtype_name(input.dtype()) << " and "
                                                        << dtype_name(target.dtype()));
  VOLT_CHECK(input.device() == target.device(), op, "expected input and target on one device");
}

Tensor reduce(const Tensor& l, Reduction reduction, const char* op) {
  switch (reduction) {
    case Reduction::None:
      return l;
    case Reduction::Mean:
      return mean(l);
    case Reduction::Sum:
      return sum(l);
  }
  throw Error(std::string(op) + ": unknown reduction " + std::to_string(static_cast<int64_t>(reduction)));
}

// A weight that must broadcast to the input's shape without growing it.
void check_weight(const Tensor& w, const Tensor& input, const char* op, const char* name) {
  if (!w.defined()) return;
  VOLT_CHECK(is_floating(w.dtype()), op, name << " must be floating, got " << dtype_name(w.dtype()));
  VOLT_CHECK(w.device() == input.device(), op, name << " must be on the input's device");
  VOLT_CHECK(broadcast_shapes(w.sizes(), input.sizes(), op) == input.sizes(), op,
             name << " of shape " << shape_str(w.sizes()) << " does not broadcast to the input "
                  << shape_str(input.sizes()));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair(input, target, "mse_loss");
  Tensor d = input - target;
  return reduce(d * d, reduction, "mse_loss");
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_pair(input, target, "smooth_l1_loss");
  VOLT_CHECK(beta >= 0, "smooth_l1_loss", "beta must be >= 0, got " << beta);
  Tensor d = input - target;
  Tensor ad = abs(d);
  if (beta == 0) return reduce(ad, reduction, "smooth_l1_loss");
  Tensor l = where(lt(ad, Value(Scalar(beta))), d * d * (0.5 / beta), ad - 0.5 * beta);
  return reduce(l, reduction, "smooth_l1_loss");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(input, target, op);
  check_weight(options.weight, input, op, "weight");
  check_weight(options.pos_weight, input, op, "pos_weight");
  // softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)), finite for every finite x
  Tensor softplus_neg = relu(-input) + log(exp(-abs(input)) + 1.0);
  Tensor coefficient = options.pos_weight.defined() ? (options.pos_weight - 1.0) * target + 1.0 : Tensor();
  Tensor l = (1.0 - target) * input + (coefficient.defined() ? coefficient * softplus_neg : softplus_neg);
  if (options.weight.defined()) l = l * options.weight;
  return reduce(l, options.reduction, op);
}

}  // namespace volt
