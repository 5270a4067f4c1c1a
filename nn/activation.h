// Activation and regularisation layers without parameters.
//
//   volt::nn::ReLU relu;                  // ReLU()
//   volt::nn::Dropout drop(0.1);          // Dropout(p=0.1, inplace=False)
//   volt::Tensor y = drop(relu(x));       // same shape as x
//   drop.eval();                          // now drop(x) returns x unchanged
//   volt::nn::GELU gelu("tanh");          // GELU(approximate='tanh')
//   volt::nn::Softmax softmax(-1);        // Softmax(dim=-1)
#pragma once
#include <string>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>

namespace volt::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
};

// x * Phi(x), with the exact normal CDF or (approximate = "tanh") GPT-2's tanh form.
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
  std::string extra_repr() const override;   // "approximate='none'"
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// exp(x) / sum(exp(x)) along dim: each slice along dim sums to 1.
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
  std::string extra_repr() const override;   // "dim=-1"
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
};

// In training, zeroes each element with probability p and scales the rest by
// 1/(1-p), so the expected value is unchanged; in eval it is the identity.
// The mask comes from the global Philox generator.
class Dropout : public Module, public Holder<Dropout> {
 public:
  // Empty until assigned (nn/holder.h): Dropout layer{nullptr};
  explicit Dropout(std::nullptr_t) : Module("Dropout"), Holder<Dropout>(nullptr), p_(0) {}
  using Holder<Dropout>::operator=;
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
  std::string extra_repr() const override;   // "p=0.1, inplace=False"
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace volt::nn
