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

namespace volt::nn {

class Linear : public Module, public Holder<Linear> {
 public:
  // Empty until assigned (nn/holder.h): Linear layer{nullptr};
  explicit Linear(std::nullptr_t) : Module("Linear"), Holder<Linear>(nullptr), in_features_(0), out_features_(0) {}
  using Holder<Linear>::operator=;
  // weight (out, in) and bias (out) are drawn from U(-1/sqrt(in), 1/sqrt(in)),
  // weight first, from the global Philox generator (PyTorch's kaiming_uniform_
  // with a = sqrt(5) works out to exactly this bound).
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  // x: (*, in) -> (*, out)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built with bias = false

 private:
  int64_t in_features_, out_features_;
  Tensor weight_, bias_;
};

}  // namespace volt::nn
