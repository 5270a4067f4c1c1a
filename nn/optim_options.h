// LibTorch's builder spelling of the optimizer options, in volt::optim:
//
//   volt::optim::SGD sgd(net->parameters(), volt::optim::SGDOptions(0.01).momentum(0.5));
//   volt::optim::Adam adam(net->parameters(), volt::optim::AdamOptions(1e-3).weight_decay(1e-4));
//
// Each converts to the plain struct of volt::nn (nn/optim.h), which keeps its
// designated initialisers: volt::nn::SGD sgd(params, {.lr = 0.01, .momentum = 0.5}).
#pragma once
#include <tuple>

#include <volt/nn/optim.h>
#include <volt/nn/option_builder.h>

namespace volt::optim {

class SGDOptions {
 public:
  SGDOptions(double lr) { o_.lr = lr; }
  VOLT_OPTION(SGDOptions, lr)
  VOLT_OPTION(SGDOptions, momentum)
  VOLT_OPTION(SGDOptions, weight_decay)
  VOLT_OPTION(SGDOptions, dampening)
  SGDOptions& nesterov(bool v) {
    o_.nesterov = v;
    return *this;
  }
  bool nesterov() const { return o_.nesterov; }
  operator const nn::SGDOptions&() const { return o_; }

 private:
  nn::SGDOptions o_;
};

class AdamOptions {
 public:
  AdamOptions(double lr = 1e-3) { o_.lr = lr; }
  VOLT_OPTION(AdamOptions, lr)
  VOLT_OPTION(AdamOptions, eps)
  VOLT_OPTION(AdamOptions, weight_decay)
  AdamOptions& betas(const std::tuple<double, double>& b) {
    o_.beta1 = std::get<0>(b);
    o_.beta2 = std::get<1>(b);
    return *this;
  }
  std::tuple<double, double> betas() const { return {o_.beta1, o_.beta2}; }
  operator const nn::AdamOptions&() const { return o_; }

 private:
  nn::AdamOptions o_;
};

class AdadeltaOptions {
 public:
  AdadeltaOptions(double lr = 1.0) { o_.lr = lr; }
  VOLT_OPTION(AdadeltaOptions, lr)
  VOLT_OPTION(AdadeltaOptions, rho)
  VOLT_OPTION(AdadeltaOptions, eps)
  VOLT_OPTION(AdadeltaOptions, weight_decay)
  operator const nn::AdadeltaOptions&() const { return o_; }

 private:
  nn::AdadeltaOptions o_;
};

}  // namespace volt::optim
