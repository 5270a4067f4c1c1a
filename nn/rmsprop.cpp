// RMSprop (nn/rmsprop.h): PyTorch's rule as in-place tensor ops.
#include <volt/nn/rmsprop.h>

#include <volt/nn/optim_detail.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

using detail::check_non_negative;

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : Optimizer(std::move(params)), options_(options), state_(params_.size()) {
  check_non_negative(options.lr, "RMSprop", "lr");
  VOLT_CHECK(options.alpha >= 0 && options.alpha <= 1, "RMSprop", "alpha must be in [0, 1], got " << options.alpha);
  check_non_negative(options.eps, "RMSprop", "eps");
  check_non_negative(options.weight_decay, "RMSprop", "weight_decay");
  check_non_negative(options.momentum, "RMSprop", "momentum");
}

void RMSprop::set_lr(double lr) {
  check_non_negative(lr, "RMSprop", "lr");
  options_.lr = lr;
}

std::vector<std::pair<std::string, Tensor*>> RMSprop::state_slots(size_t i) {
  State& s = state_.at(i);
  std::vector<std::pair<std::string, Tensor*>> slots{{"square_avg", &s.square_avg}};
  if (options_.momentum > 0) slots.emplace_back("momentum_buffer", &s.momentum_buffer);
  if (options_.centered) slots.emplace_back("grad_avg", &s.grad_avg);
  return slots;
}

void RMSprop::step() {
  NoGradGuard no_grad;
  VOLT_CHECK(params_.empty() || !params_[0].is_proxy() || params_[0].device().is_lazy(), "RMSprop",
             "step() cannot be traced (volt::jit::compile_step); use SGD, Adam, AdamW or Adadelta there");
  const auto& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    VOLT_CHECK(g.sizes() == p.sizes(), "RMSprop",
               "grad has shape " << shape_str(g.sizes()) << ", parameter " << shape_str(p.sizes()));
    if (g.dtype() != p.dtype()) g = g.to(p.dtype());
    if (g.device() != p.device()) g = g.to(p.device());
    State& st = state_[i];
    for (auto& [name, t] : state_slots(i)) {
      if (t->defined()) detail::follow_device(*t, p);
      else *t = Tensor::zeros(p.sizes(), p.dtype(), p.device());
    }
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    st.square_avg.mul_(o.alpha).add_(g * g, 1.0 - o.alpha);
    Tensor avg;
    if (o.centered) {
      st.grad_avg.mul_(o.alpha).add_(g, 1.0 - o.alpha);
      avg = volt::sqrt(st.square_avg - st.grad_avg * st.grad_avg) + o.eps;
    } else {
      avg = volt::sqrt(st.square_avg) + o.eps;
    }
    if (o.momentum > 0) {
      st.momentum_buffer.mul_(o.momentum).add_(g / avg);
      p.add_(st.momentum_buffer, -o.lr);
    } else {
      p.add_(g / avg, -o.lr);
    }
  }
}

}  // namespace volt::nn
