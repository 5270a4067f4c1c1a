#include <volt/nn/init.h>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn::init {

namespace {

// Writes `values` into `tensor` outside autograd: a parameter is a leaf that
// requires grad, and filling it is not part of any computation.
Tensor fill(Tensor tensor, const Tensor& values) {
  tensor.copy_(values);
  return tensor;
}

void check(const Tensor& tensor, const char* op) {
  VOLT_CHECK(tensor.defined() && tensor.has_data(), op,
             "needs a tensor with storage, got " << (tensor.defined() ? tensor.meta_str() : std::string("undefined")));
}

}  // namespace

Tensor normal_(Tensor tensor, double mean, double std) {
  check(tensor, "nn::init::normal_");
  VOLT_CHECK(std >= 0, "nn::init::normal_", "std must be >= 0, got " << std);
  VOLT_CHECK(is_floating(tensor.dtype()), "nn::init::normal_", "needs a floating tensor, got " << tensor.meta_str());
  NoGradGuard no_grad;
  return fill(tensor, Tensor::randn(tensor.sizes(), tensor.dtype(), tensor.device()) * std + mean);
}

Tensor uniform_(Tensor tensor, double low, double high) {
  check(tensor, "nn::init::uniform_");
  VOLT_CHECK(low <= high, "nn::init::uniform_", "low must be <= high, got " << low << " and " << high);
  VOLT_CHECK(is_floating(tensor.dtype()), "nn::init::uniform_", "needs a floating tensor, got " << tensor.meta_str());
  NoGradGuard no_grad;
  return fill(tensor, Tensor::rand(tensor.sizes(), tensor.dtype(), tensor.device()) * (high - low) + low);
}

Tensor constant_(Tensor tensor, double value) {
  check(tensor, "nn::init::constant_");
  NoGradGuard no_grad;
  return fill(tensor, Tensor::full(tensor.sizes(), value, tensor.dtype(), tensor.device()));
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

}  // namespace volt::nn::init
