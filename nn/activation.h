// Activation and regularisation layers without parameters.
//
//   volt::nn::ReLU relu;                  // ReLU()
//   volt::nn::Dropout drop(0.1);          // Dropout(p=0.1, inplace=False)
//   volt::Tensor y = drop(relu(x));       // same shape as x
//   drop.eval();                          // now drop(x) returns x unchanged
#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
};

// In training, zeroes each element with probability p and scales the rest by
// 1/(1-p), so the expected value is unchanged; in eval it is the identity.
// The mask comes from the global Philox generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;  // x: any shape -> same shape
  std::string extra_repr() const override;   // "p=0.1, inplace=False"
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace volt::nn
