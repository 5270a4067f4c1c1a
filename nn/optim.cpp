#include "nn/optim.h"

#include <cmath>
#include <type_traits>

#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace volt::nn {

namespace {

// Below this many elements a parallel loop costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 16;

// Whether a step can run as one loop over raw host memory.
bool host_fast_path(const Tensor& p) {
  return p.device().is_cpu() && p.has_data() && p.is_contiguous() &&
         (p.dtype() == DType::f32 || p.dtype() == DType::f64);
}

// The gradient as a contiguous tensor of the parameter's dtype and device.
Tensor grad_like(const Tensor& p) {
  Tensor g = p.grad();
  VOLT_CHECK(g.sizes() == p.sizes(), "optimizer step",
             "grad has shape " << shape_str(g.sizes()) << ", parameter "
                               << shape_str(p.sizes()));
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  if (g.device() != p.device()) g = g.to(p.device());
  return g.is_contiguous() ? g : g.contiguous();
}

// State made before a module moved follows its parameter.
void follow_device(Tensor& state, const Tensor& p) {
  if (state.defined() && state.device() != p.device()) state = state.to(p.device());
}

// ---- kernels: one pass over p, g and the state; T is float or double ----

// The per-step constants, computed in double and rounded once to T, as torch
// passes Python floats to its kernels (1 - beta2 in float would be off by 1e-5).
template <class T>
struct AdamScalars {
  T one_minus_beta1, beta2, one_minus_beta2, weight_decay, neg_step_size, bias_correction2_sqrt,
      eps;
};

// p, g, m, v: (n)
template <class T>
void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, const AdamScalars<T>& c) {
  const T one_minus_beta1 = c.one_minus_beta1, beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2,
          weight_decay = c.weight_decay, neg_step_size = c.neg_step_size,
          bias_correction2_sqrt = c.bias_correction2_sqrt, eps = c.eps;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
#endif
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (weight_decay != T(0)) gi += weight_decay * p[i];
    // m moves towards g as torch's lerp_ does it: m + w (g - m)
    const T mi = m[i] + one_minus_beta1 * (gi - m[i]);
    const T vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] += neg_step_size * mi / (std::sqrt(vi) / bias_correction2_sqrt + eps);
  }
}

// p, g, buf: (n); buf is null when momentum is 0.
template <class T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T momentum, T weight_decay,
                bool first_step) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
#endif
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (weight_decay != T(0)) gi += weight_decay * p[i];
    if (buf) {
      buf[i] = first_step ? gi : momentum * buf[i] + gi;
      gi = buf[i];
    }
    p[i] += -lr * gi;
  }
}

}  // namespace

// ---- Optimizer ----

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i)
    VOLT_CHECK(params_[i].defined(), "optimizer", "parameter " << i << " is undefined");
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.impl()->grad.reset();
}

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(options), momentum_(params_.size()) {
  VOLT_CHECK(options.lr >= 0, "SGD", "lr must be >= 0, got " << options.lr);
  VOLT_CHECK(options.momentum >= 0, "SGD", "momentum must be >= 0, got " << options.momentum);
}

void SGD::step() {
  NoGradGuard no_grad;
  const auto& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_like(p);
    Tensor& buf = momentum_[i];
    follow_device(buf, p);
    const bool first = !buf.defined();
    if (o.momentum != 0 && first) buf = Tensor::zeros(p.sizes(), p.dtype(), p.device());

    if (host_fast_path(p)) {
      VOLT_DISPATCH_DTYPE(p.dtype(), [&] {
        if constexpr (std::is_floating_point_v<scalar_t>) {
          sgd_kernel<scalar_t>(p.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                               o.momentum != 0 ? buf.data_ptr<scalar_t>() : nullptr, p.numel(),
                               static_cast<scalar_t>(o.lr), static_cast<scalar_t>(o.momentum),
                               static_cast<scalar_t>(o.weight_decay), first);
        }
      });
      continue;
    }
    // Other devices: the same rule as in-place tensor ops.
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    if (o.momentum != 0) {
      if (first) buf.copy_(g);
      else buf.mul_(o.momentum).add_(g);
      g = buf;
    }
    p.add_(g, -o.lr);
  }
}

// ---- Adam ----

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Optimizer(std::move(params)), options_(options), state_(params_.size()) {
  VOLT_CHECK(options.lr >= 0, "Adam", "lr must be >= 0, got " << options.lr);
  VOLT_CHECK(options.beta1 >= 0 && options.beta1 < 1, "Adam",
             "beta1 must be in [0, 1), got " << options.beta1);
  VOLT_CHECK(options.beta2 >= 0 && options.beta2 < 1, "Adam",
             "beta2 must be in [0, 1), got " << options.beta2);
  VOLT_CHECK(options.eps >= 0, "Adam", "eps must be >= 0, got " << options.eps);
}

void Adam::step() {
  NoGradGuard no_grad;
  const auto& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_like(p);
    State& s = state_[i];
    follow_device(s.m, p);
    follow_device(s.v, p);
    if (!s.m.defined()) {
      s.m = Tensor::zeros(p.sizes(), p.dtype(), p.device());
      s.v = Tensor::zeros(p.sizes(), p.dtype(), p.device());
    }
    s.step += 1;
    const double t = static_cast<double>(s.step);
    const double step_size = o.lr / (1.0 - std::pow(o.beta1, t));
    const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));

    if (host_fast_path(p)) {
      VOLT_DISPATCH_DTYPE(p.dtype(), [&] {
        if constexpr (std::is_floating_point_v<scalar_t>) {
          using T = scalar_t;
          const AdamScalars<T> c{T(1.0 - o.beta1),     T(o.beta2),
                                 T(1.0 - o.beta2),     T(o.weight_decay),
                                 T(-step_size),        T(bias_correction2_sqrt),
                                 T(o.eps)};
          adam_kernel<T>(p.data_ptr<T>(), g.data_ptr<T>(), s.m.data_ptr<T>(), s.v.data_ptr<T>(),
                         p.numel(), c);
        }
      });
      continue;
    }
    // Other devices: the same rule as tensor ops (temporaries included) until a
    // fused device kernel takes this over.
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    s.m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
    s.v.mul_(o.beta2).add_(g * g, 1.0 - o.beta2);
    p.add_(s.m / (volt::sqrt(s.v) / bias_correction2_sqrt + o.eps), -step_size);
  }
}

}  // namespace volt::nn
