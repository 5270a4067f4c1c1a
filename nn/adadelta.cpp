// Adadelta (nn/optim.h): PyTorch's rule, one pass over each parameter's memory
// on the CPU, in-place tensor ops elsewhere (the lazy device, CUDA).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <volt/nn/optim.h>
#include <volt/nn/optim_detail.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

using detail::check_non_negative;

namespace {

// p, g, s (square_avg), d (acc_delta): (n).  Each statement is the tensor op
// PyTorch runs, in its order, rounded to T.
template <class T>
void adadelta_kernel(T* p, const T* g, T* s, T* d, int64_t n, T lr, T rho, T one_minus_rho, T eps, T wd) {
  cpu::parallel_for(n, int64_t(1) << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T gi = g[i];
      if (wd != T(0)) gi = gi + wd * p[i];
      s[i] = s[i] * rho + one_minus_rho * gi * gi;
      const T std_ = std::sqrt(s[i] + eps);
      const T delta = std::sqrt(d[i] + eps) / std_ * gi;
      d[i] = d[i] * rho + one_minus_rho * delta * delta;
      p[i] = p[i] + -lr * delta;
    }
  });
}

// Parameter p's gradient, checked and in p's dtype and device.
Tensor grad_for(const Tensor& p) {
  Tensor g = p.grad();
  VOLT_CHECK(g.sizes() == p.sizes(), "Adadelta",
             "grad has shape " << shape_str(g.sizes()) << ", parameter " << shape_str(p.sizes()));
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  if (g.device() != p.device()) g = g.to(p.device());
  return g;
}

}  // namespace

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options)
    : Optimizer(std::move(params)), options_(options), state_(params_.size()) {
  check_non_negative(options.lr, "Adadelta", "lr");
  VOLT_CHECK(options.rho >= 0 && options.rho <= 1, "Adadelta", "rho must be in [0, 1], got " << options.rho);
  check_non_negative(options.eps, "Adadelta", "eps");
  check_non_negative(options.weight_decay, "Adadelta", "weight_decay");
}

void Adadelta::set_lr(double lr) {
  check_non_negative(lr, "Adadelta", "lr");
  options_.lr = lr;
}

std::vector<Tensor> Adadelta::state_tensors() {
  std::vector<Tensor> r;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    State& st = state_[i];
    for (Tensor* t : {&st.square_avg, &st.acc_delta}) {
      if (t->defined() && t->device() != p.device()) *t = t->to(p.device());
      // Zeros are the first step's state: the rule needs no first-step case.
      if (!t->defined()) *t = Tensor::zeros(p.sizes(), p.dtype(), p.device());
      r.push_back(*t);
    }
  }
  return r;
}

std::vector<Optimizer::RunTimeScalar> Adadelta::run_time_scalars() { return learning_rate_scalar(lr_); }

// The rule of step() as volt ops, in the kernel's order of operations, read
// by a tracer (volt::jit::compile_step); the learning rate is lr_.
void Adadelta::traced_step() {
  const auto& o = options_;
  std::vector<std::pair<DType, Tensor>> neg_lr;  // rounded once per dtype
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_for(p);
    auto c = std::find_if(neg_lr.begin(), neg_lr.end(), [&](const auto& k) { return k.first == p.dtype(); });
    if (c == neg_lr.end()) c = neg_lr.insert(neg_lr.end(), {p.dtype(), (-lr_).to(p.dtype())});
    State& st = state_[i];
    if (o.weight_decay != 0) g = g + o.weight_decay * p;
    st.square_avg.copy_(st.square_avg * o.rho + ((1.0 - o.rho) * g) * g);
    Tensor delta = volt::sqrt(st.acc_delta + o.eps) / volt::sqrt(st.square_avg + o.eps) * g;
    st.acc_delta.copy_(st.acc_delta * o.rho + ((1.0 - o.rho) * delta) * delta);
    p.copy_(p + c->second * delta);
  }
}

void Adadelta::step() {
  NoGradGuard no_grad;
  if (current_mode() != nullptr && !params_.empty() && params_[0].is_proxy() && !params_[0].device().is_lazy()) {
    VOLT_CHECK(lr_.defined() && (state_.empty() || state_[0].square_avg.defined()), "Adadelta",
               "step() is being traced without its run-time state; pass the optimizer to "
               "volt::jit::compile_step as state");
    traced_step();
    return;
  }
  const auto& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_for(p);
    State& st = state_[i];
    for (Tensor* t : {&st.square_avg, &st.acc_delta})
      if (t->defined() && t->device() != p.device()) *t = t->to(p.device());
    if (!st.square_avg.defined()) {
      st.square_avg = Tensor::zeros(p.sizes(), p.dtype(), p.device());
      st.acc_delta = Tensor::zeros(p.sizes(), p.dtype(), p.device());
    }
    if (p.device().is_cpu() && p.has_data() && p.is_contiguous() &&
        (p.dtype() == DType::f32 || p.dtype() == DType::f64)) {
      const Tensor gc = g.is_contiguous() ? g : g.contiguous();
      VOLT_DISPATCH_DTYPE(p.dtype(), [&] {
        if constexpr (std::is_floating_point_v<scalar_t>) {
          using T = scalar_t;
          adadelta_kernel<T>(p.data_ptr<T>(), gc.data_ptr<T>(), st.square_avg.data_ptr<T>(),
                             st.acc_delta.data_ptr<T>(), p.numel(), T(o.lr), T(o.rho), T(1.0 - o.rho), T(o.eps),
                             T(o.weight_decay));
        }
      });
      continue;
    }
    // Other devices: the same rule as tensor ops (scalars stay run-time values
    // on the lazy device, so a new learning rate reuses the compiled step).
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    st.square_avg.mul_(o.rho).add_(g * g, 1.0 - o.rho);
    Tensor delta = volt::sqrt(st.acc_delta + o.eps) / volt::sqrt(st.square_avg + o.eps) * g;
    st.acc_delta.mul_(o.rho).add_(delta * delta, 1.0 - o.rho);
    p.add_(delta, -o.lr);
  }
}

}  // namespace volt::nn
