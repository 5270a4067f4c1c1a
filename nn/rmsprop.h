// RMSprop with PyTorch's rule and defaults.
//
//   volt::nn::RMSprop opt(net->parameters(), {.lr = 1e-2, .alpha = 0.99});
//
// With g += wd * p first, and square_avg s (and grad_avg a, momentum_buffer b) starting at 0:
//   s = alpha s + (1 - alpha) g^2
//   avg = sqrt(s) + eps,  or, centred: a = alpha a + (1 - alpha) g;  avg = sqrt(s - a^2) + eps
//   momentum > 0: b = momentum b + g / avg;  p -= lr b      else: p -= lr g / avg
// It runs as tensor ops (CPU, CUDA, the lazy device); compile_step does not trace it.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <volt/nn/optim.h>

namespace volt::nn {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  void step() override;
  const RMSpropOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const Tensor& square_avg(size_t i) const { return state_.at(i).square_avg; }

 private:
  struct State {
    Tensor square_avg, grad_avg, momentum_buffer;  // undefined until the parameter's first step
  };
  std::vector<std::pair<std::string, Tensor*>> state_slots(size_t i) override;
  RMSpropOptions options_;
  std::vector<State> state_;
};

}  // namespace volt::nn

namespace volt::optim {
using nn::RMSprop;

// The builder spelling, as nn/optim_options.h: optim::RMSpropOptions(0.01).alpha(0.9).
class RMSpropOptions {
 public:
  RMSpropOptions(double lr = 1e-2) { o_.lr = lr; }
  RMSpropOptions& lr(double v) { o_.lr = v; return *this; }
  RMSpropOptions& alpha(double v) { o_.alpha = v; return *this; }
  RMSpropOptions& eps(double v) { o_.eps = v; return *this; }
  RMSpropOptions& weight_decay(double v) { o_.weight_decay = v; return *this; }
  RMSpropOptions& momentum(double v) { o_.momentum = v; return *this; }
  RMSpropOptions& centered(bool v) { o_.centered = v; return *this; }
  double lr() const { return o_.lr; }
  double alpha() const { return o_.alpha; }
  double eps() const { return o_.eps; }
  double weight_decay() const { return o_.weight_decay; }
  double momentum() const { return o_.momentum; }
  bool centered() const { return o_.centered; }
  operator const nn::RMSpropOptions&() const { return o_; }

 private:
  nn::RMSpropOptions o_;
};
}  // namespace volt::optim
