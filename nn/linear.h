// volt::nn::Linear — y = x W^T + b, initialised as PyTorch does.
//
//   volt::manual_seed(0);
//   auto fc = std::make_shared<volt::nn::Linear>(784, 10);
//   volt::Tensor y = (*fc)(x);  // x: (B, 784) -> y: (B, 10)
//   std::cout << *fc;           // Linear(in_features=784, out_features=10, bias=True)
#pragma once
#include <cstdint>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>
#include <volt/nn/parameter_field.h>

namespace volt::nn {

// LibTorch's builder: Linear(LinearOptions(768, 50257).bias(false)).
class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features) : in_(in_features), out_(out_features) {}
  LinearOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  bool bias() const { return bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool bias_ = true;
};

class Linear : public Module, public Holder<Linear> {
 public:
  // Empty until assigned (nn/holder.h): Linear layer{nullptr};
  explicit Linear(std::nullptr_t) : Module("Linear"), Holder<Linear>(nullptr), in_features_(0), out_features_(0) {}
  using Holder<Linear>::operator=;
  // weight (out, in) and bias (out) are drawn from U(-1/sqrt(in), 1/sqrt(in)),
  // weight first, from the global Philox generator (PyTorch's kaiming_uniform_
  // with a = sqrt(5) works out to exactly this bound).
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  explicit Linear(const LinearOptions& options)
      : Linear(options.in_features(), options.out_features(), options.bias()) {}

  // x: (*, in) -> (*, out)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  // weight (out, in) and bias (out), undefined when built with bias = false;
  // fc->weight or fc->weight() (nn/parameter_field.h)
  ParameterField weight, bias;

 private:
  int64_t in_features_, out_features_;
};

}  // namespace volt::nn
