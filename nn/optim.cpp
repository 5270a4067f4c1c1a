#include <volt/nn/optim.h>
#include <volt/nn/optim_detail.h>

#include <Eigen/Core>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/convert_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/cuda/optim.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

namespace detail {

bool host_fast_path(const Tensor& p) {
  return p.device().is_cpu() && p.has_data() && p.is_contiguous() &&
         (p.dtype() == DType::f32 || p.dtype() == DType::f64);
}

bool cuda_fused_path(const Tensor& p) {
#ifdef VOLT_WITH_CUDA
  return p.device().is_cuda() && p.has_data() && p.is_contiguous() &&
         (p.dtype() == DType::f32 || p.dtype() == DType::f64);
#else
  (void)p;
  return false;
#endif
}

Tensor grad_like(const Tensor& p) {
  Tensor g = p.grad();
  VOLT_CHECK(g.sizes() == p.sizes(), "optimizer step",
             "grad has shape " << shape_str(g.sizes()) << ", parameter "
                               << shape_str(p.sizes()));
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  if (g.device() != p.device()) g = g.to(p.device());
  return g.is_contiguous() ? g : g.contiguous();
}

bool traced(const std::vector<Tensor>& params) {
  return current_mode() != nullptr && !params.empty() && params[0].is_proxy() && !params[0].device().is_lazy();
}

Tensor host_bf16_copy(const Tensor& p) {
  if (!host_fast_path(p) || p.dtype() != DType::f32) return Tensor();
  Tensor c = autocast_cached_copy(p);
  return c.defined() && c.dtype() == DType::bf16 && c.is_contiguous() && c.numel() == p.numel() ? c : Tensor();
}

Tensor scalar_f64(double v, const Tensor& like) { return Tensor::full({}, v, DType::f64, like.device()); }

void check_non_negative(double v, const char* who, const char* what) {
  VOLT_CHECK(std::isfinite(v) && v >= 0, who, what << " must be >= 0 and finite, got " << v);
}

void follow_device(Tensor& state, const Tensor& p) {
  if (state.defined() && state.device() != p.device()) state = state.to(p.device());
}

}  // namespace detail

using namespace detail;

namespace {

// Below this many elements a parallel loop costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 16;

// ---- kernels: one pass over p, g and the state; T is float or double ----

template <class T>
struct AdamScalars {
  T one_minus_beta1, beta2, one_minus_beta2, weight_decay, neg_step_size, bias_correction2_sqrt,
      eps, decay;
};

// Adam works on blocks this long: the block of p, g, m and v (16 KiB in f32)
// stays in L1 between the statements of adam_block, so each byte of the
// parameters and their state crosses the memory bus once per step.
constexpr int64_t kAdamBlock = 1024;

// x[i] = sqrt(x[i]), correctly rounded as std::sqrt is (Eigen's vectorised
// sqrt is an approximation under its default EIGEN_FAST_MATH, and a plain loop
// calling std::sqrt does not vectorise because of errno).  x: (n), 64-byte aligned.
// (GCC 12 warns falsely about the undefined source operand inside its AVX-512 intrinsics.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <class T>
void sqrt_in_place(T* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>)
    for (; i + 16 <= n; i += 16) _mm512_store_ps(x + i, _mm512_sqrt_ps(_mm512_load_ps(x + i)));
  else
    for (; i + 8 <= n; i += 8) _mm512_store_pd(x + i, _mm512_sqrt_pd(_mm512_load_pd(x + i)));
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>)
    for (; i + 8 <= n; i += 8) _mm256_store_ps(x + i, _mm256_sqrt_ps(_mm256_load_ps(x + i)));
  else
    for (; i + 4 <= n; i += 4) _mm256_store_pd(x + i, _mm256_sqrt_pd(_mm256_load_pd(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}
#pragma GCC diagnostic pop

// p, g, m, v: (n), n <= kAdamBlock.  The operations are evaluated in the order
// of the scalar rule (each one IEEE-rounded), so results do not depend on the
// vector width and match a plain loop to the bit.
template <class T>
void adam_block(T* p, const T* g, T* m, T* v, int64_t n, const AdamScalars<T>& c) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<Array> P(p, n), M(m, n), V(v, n);
  alignas(64) T tmp[kAdamBlock];
  Eigen::Map<Array> Tmp(tmp, n);
  if (c.weight_decay != T(0)) {
    Tmp = Eigen::Map<const Array>(g, n) + c.weight_decay * P;
    g = tmp;
  }
  if (c.decay != T(1)) P *= c.decay;  // AdamW: decoupled from the gradient
  Eigen::Map<const Array> G(g, n);
  M += c.one_minus_beta1 * (G - M);  // m moves towards g as torch's lerp_ does it: m + w (g - m)
  V = V * c.beta2 + (c.one_minus_beta2 * G) * G;
  Tmp = V;  // g (if it was decayed into tmp) is not needed any more
  sqrt_in_place(tmp, n);
  P += (c.neg_step_size * M) / (Tmp / c.bias_correction2_sqrt + c.eps);
}

// One parameter's share of a step: raw pointers into p, its grad and its state.
template <class T>
struct AdamWork {
  T *p, *m, *v;
  const T* g;
  int64_t n;
  AdamScalars<T> c;
  BF16* low = nullptr;  // the bf16 copy of p to write as well, or none
};

// The per-step constants, computed in double and rounded once to T, as torch
// passes Python floats to its kernels (1 - beta2 in float would be off by 1e-5).
template <class T>
AdamWork<T> adam_work(const AdamHostSlot& s, double beta1, double beta2, double eps, double weight_decay) {
  const AdamScalars<T> c{T(1.0 - beta1),    T(beta2),          T(1.0 - beta2),
                         T(weight_decay),   T(-s.step_size),   T(s.bias_correction2_sqrt),
                         T(eps),            T(s.decay)};
  BF16* low = std::is_same_v<T, float> && s.low.defined() ? static_cast<BF16*>(s.low.raw_data()) : nullptr;
  return {s.p.data_ptr<T>(), s.m.data_ptr<T>(), s.v.data_ptr<T>(), s.g.data_ptr<T>(), s.p.numel(), c, low};
}

// Runs every parameter's update as one parallel loop over blocks, so a step
// pays for one fork/join of the threads, not one per parameter.
template <class T>
void adam_multi(const std::vector<AdamWork<T>>& work) {
  std::vector<std::pair<size_t, int64_t>> blocks;  // (work item, first element)
  int64_t total = 0;
  for (size_t w = 0; w < work.size(); ++w) {
    for (int64_t i = 0; i < work[w].n; i += kAdamBlock) blocks.emplace_back(w, i);
    total += work[w].n;
  }
  const int64_t nb = static_cast<int64_t>(blocks.size());
  // On volt's threads (tensor/cpu/threads.h), as the backend's loops: one set of threads.
  cpu::parallel_for(nb, total >= kParallelGrain ? 1 : std::max<int64_t>(1, nb), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const AdamWork<T>& w = work[blocks[b].first];
      const int64_t i = blocks[b].second;
      const int64_t n = std::min(kAdamBlock, w.n - i);
      adam_block<T>(w.p + i, w.g + i, w.m + i, w.v + i, n, w.c);
      // The block of p is still in L1: its bf16 copy costs a write, not a pass.
      if constexpr (std::is_same_v<T, float>)
        if (w.low) cpu::f32_to_bf16(w.p + i, w.low + i, n);
    }
  });
}

// p, g, buf: (n); buf is null when momentum is 0.
template <class T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T momentum, T weight_decay,
                bool first_step) {
  cpu::parallel_for(n, kParallelGrain / 2, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T gi = g[i];
      if (weight_decay != T(0)) gi += weight_decay * p[i];
      if (buf) {
        buf[i] = first_step ? gi : momentum * buf[i] + gi;
        gi = buf[i];
      }
      p[i] += -lr * gi;
    }
  });
}

}  // namespace

void detail::adam_host_step(const std::vector<AdamHostSlot>& slots, double beta1, double beta2, double eps,
                            double weight_decay) {
  std::vector<AdamWork<float>> work_f32;
  std::vector<AdamWork<double>> work_f64;
  for (const AdamHostSlot& s : slots) {
    if (s.p.dtype() == DType::f32) work_f32.push_back(adam_work<float>(s, beta1, beta2, eps, weight_decay));
    else work_f64.push_back(adam_work<double>(s, beta1, beta2, eps, weight_decay));
  }
  adam_multi(work_f32);
  adam_multi(work_f64);
  for (const AdamHostSlot& s : slots)
    if (s.low.defined() && s.p.dtype() == DType::f32) autocast_copy_rewritten(s.p);
}

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
  check_non_negative(options.lr, "SGD", "lr");
  check_non_negative(options.momentum, "SGD", "momentum");
  check_non_negative(options.weight_decay, "SGD", "weight_decay");
  VOLT_CHECK(std::isfinite(options.dampening), "SGD", "dampening must be finite, got " << options.dampening);
  VOLT_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), "SGD",
             "Nesterov momentum needs a momentum > 0 and zero dampening, got momentum "
                 << options.momentum << " and dampening " << options.dampening);
}

void SGD::set_lr(double lr) {
  check_non_negative(lr, "SGD", "lr");
  options_.lr = lr;
}

std::vector<Tensor> SGD::state_tensors() {
  std::vector<Tensor> r;
  if (options_.momentum == 0) return r;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& buf = momentum_[i];
    follow_device(buf, params_[i]);
    // A zero buffer: the first step's momentum * 0 + g is g, the first-step rule.
    if (!buf.defined()) buf = Tensor::zeros(params_[i].sizes(), params_[i].dtype(), params_[i].device());
    r.push_back(buf);
  }
  return r;
}

std::vector<Optimizer::RunTimeScalar> Optimizer::learning_rate_scalar(Tensor& slot) {
  if (!slot.defined() && !params_.empty()) slot = scalar_f64(lr(), params_[0]);
  if (!slot.defined()) return {};
  return {{slot, [this] { return lr(); }}};
}

std::vector<Optimizer::RunTimeScalar> SGD::run_time_scalars() { return learning_rate_scalar(lr_); }

// The rule of step() as volt ops, read by a tracer; the learning rate is lr_.
void SGD::traced_step() {
  const auto& o = options_;
  // -lr rounded once per dtype before any update (same-shaped updates can then fuse).
  std::vector<std::pair<DType, Tensor>> neg_lr;
  for (const Tensor& p : params_)
    if (p.grad().defined() && std::none_of(neg_lr.begin(), neg_lr.end(), [&](const auto& c) { return c.first == p.dtype(); }))
      neg_lr.push_back({p.dtype(), (-lr_).to(p.dtype())});
  VOLT_CHECK(o.momentum == 0 || o.dampening == 0, "SGD",
             "dampening " << o.dampening << " in a traced step (compile_step) is not supported: the "
                          "traced program cannot tell the first step (buf = g, undamped) from the "
                          "others; step eagerly, or use dampening 0");
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_like(p);
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    if (o.momentum != 0) {
      momentum_[i].copy_(momentum_[i] * o.momentum + g);
      g = o.nesterov ? g + momentum_[i] * o.momentum : momentum_[i];
    }
    const Tensor& step = std::find_if(neg_lr.begin(), neg_lr.end(), [&](const auto& c) { return c.first == p.dtype(); })->second;
    p.copy_(p + step * g);
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  if (traced(params_)) {
    VOLT_CHECK(lr_.defined() && (options_.momentum == 0 || (!momentum_.empty() && momentum_[0].defined())), "SGD",
               "step() is being traced without its run-time state; pass the optimizer to "
               "volt::jit::compile_step as state");
    traced_step();
    return;
  }
  const auto& o = options_;
  // The fused kernels take the plain rule; dampening and Nesterov take the ops below.
  const bool plain = o.dampening == 0 && !o.nesterov;
  std::vector<cuda::SGDSlot> cuda_slots;  // CUDA parameters: one fused launch below
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    p.mark_modified();  // written in place below, some paths through data_ptr
    Tensor g = grad_like(p);
    Tensor& buf = momentum_[i];
    follow_device(buf, p);
    const bool first = !buf.defined();
    if (o.momentum != 0 && first) buf = Tensor::zeros(p.sizes(), p.dtype(), p.device());

    if (plain && cuda_fused_path(p)) {
      cuda_slots.push_back({p, g, o.momentum != 0 ? buf : Tensor(), first});
      continue;
    }
    if (plain && host_fast_path(p)) {
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
      else buf.mul_(o.momentum).add_(g, 1 - o.dampening);
      g = o.nesterov ? g + buf * o.momentum : buf;
    }
    p.add_(g, -o.lr);
  }
#ifdef VOLT_WITH_CUDA
  if (!cuda_slots.empty()) cuda::fused_sgd(cuda_slots, o.lr, o.momentum, o.weight_decay);
#endif
}

// ---- Adam ----

AdamBase::AdamBase(std::vector<Tensor> params) : Optimizer(std::move(params)), state_(params_.size()) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : AdamBase(std::move(params)), options_(options) {
  check_non_negative(options.lr, "Adam", "lr");
  VOLT_CHECK(options.beta1 >= 0 && options.beta1 < 1, "Adam",
             "beta1 must be in [0, 1), got " << options.beta1);
  VOLT_CHECK(options.beta2 >= 0 && options.beta2 < 1, "Adam",
             "beta2 must be in [0, 1), got " << options.beta2);
  check_non_negative(options.eps, "Adam", "eps");
  check_non_negative(options.weight_decay, "Adam", "weight_decay");
}

void Adam::set_lr(double lr) {
  check_non_negative(lr, "Adam", "lr");
  options_.lr = lr;
}

int64_t AdamBase::step_count(size_t i) const {
  const State& s = state_.at(i);
  return step_.defined() && s.m.defined() ? static_cast<int64_t>(step_.item_double()) : s.step;
}

// Parameter i's moments, made (zeros) on first use and kept on its device.
AdamBase::State& AdamBase::ready_state(size_t i) {
  const Tensor& p = params_[i];
  State& s = state_[i];
  follow_device(s.m, p);
  follow_device(s.v, p);
  if (!s.m.defined()) {
    s.m = Tensor::zeros(p.sizes(), p.dtype(), p.device());
    s.v = Tensor::zeros(p.sizes(), p.dtype(), p.device());
  }
  return s;
}

std::vector<Tensor> AdamBase::state_tensors() {
  std::vector<Tensor> r;
  int64_t count = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    State& s = ready_state(i);
    count = std::max(count, s.step);
    r.push_back(s.m);
    r.push_back(s.v);
  }
  if (!step_.defined() && !params_.empty()) step_ = scalar_f64(static_cast<double>(count), params_[0]);
  if (step_.defined()) r.push_back(step_);
  return r;
}

std::vector<Optimizer::RunTimeScalar> Adam::run_time_scalars() { return learning_rate_scalar(lr_); }

// The rule of step() as volt ops, in the same order of operations, read by a
// tracer.  The step count step_ and the learning rate lr_ are tensors, so the
// bias corrections are computed when the compiled step runs.
void Adam::traced_step() {
  const auto& o = options_;
  step_.copy_(step_ + 1.0);
  const Tensor step_size = lr_ / (1.0 - pow(o.beta1, step_));
  const Tensor bias_correction2_sqrt = sqrt(1.0 - pow(o.beta2, step_));
  // The constants, rounded once per dtype before any parameter's update, so a
  // compiler can fuse the updates of same-shaped parameters into one pass.
  std::vector<std::pair<DType, std::pair<Tensor, Tensor>>> constants;
  for (const Tensor& p : params_)
    if (p.grad().defined() && std::none_of(constants.begin(), constants.end(), [&](const auto& c) { return c.first == p.dtype(); }))
      constants.push_back({p.dtype(), {(-step_size).to(p.dtype()), bias_correction2_sqrt.to(p.dtype())}});
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = grad_like(p);
    State& s = state_[i];
    const auto& c = std::find_if(constants.begin(), constants.end(), [&](const auto& k) { return k.first == p.dtype(); })->second;
    if (o.weight_decay != 0) g = g + o.weight_decay * p;
    s.m.copy_(s.m + (1.0 - o.beta1) * (g - s.m));
    s.v.copy_(s.v * o.beta2 + ((1.0 - o.beta2) * g) * g);
    p.copy_(p + (c.first * s.m) / (sqrt(s.v) / c.second + o.eps));
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  if (traced(params_)) {
    VOLT_CHECK(lr_.defined() && step_.defined(), "Adam",
               "step() is being traced without its run-time state; pass the optimizer to "
               "volt::jit::compile_step as state");
    traced_step();
    return;
  }
  const auto& o = options_;
  // Once a compiled step made the step-count tensor, it is the count.
  const int64_t counted = step_.defined() ? static_cast<int64_t>(step_.item_double()) : -1;
  std::vector<AdamHostSlot> host_slots;  // CPU parameters: one pass below
  std::vector<cuda::AdamSlot> cuda_slots;  // CUDA parameters: one fused launch below
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const Tensor low = host_bf16_copy(p);
    p.mark_modified();  // written in place below, some paths through data_ptr
    Tensor g = grad_like(p);
    State& s = ready_state(i);
    s.step = counted >= 0 ? counted + 1 : s.step + 1;
    const double t = static_cast<double>(s.step);
    const double step_size = o.lr / (1.0 - std::pow(o.beta1, t));
    const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));

    if (cuda_fused_path(p)) {
      cuda_slots.push_back({p, g, s.m, s.v, step_size, bias_correction2_sqrt});
      continue;
    }
    if (host_fast_path(p)) {
      // Collected here, run below in one pass over all parameters.
      host_slots.push_back({p, g, s.m, s.v, step_size, bias_correction2_sqrt, 1.0, low});
      continue;
    }
    // Other devices (lazy; CUDA parameters that are not contiguous): the same
    // rule as tensor ops, temporaries included.
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    s.m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
    s.v.mul_(o.beta2).add_(g * g, 1.0 - o.beta2);
    p.add_(s.m / (volt::sqrt(s.v) / bias_correction2_sqrt + o.eps), -step_size);
  }
  adam_host_step(host_slots, o.beta1, o.beta2, o.eps, o.weight_decay);
  if (counted >= 0) step_.fill_(static_cast<double>(counted + 1));
#ifdef VOLT_WITH_CUDA
  if (!cuda_slots.empty()) cuda::fused_adam(cuda_slots, o.beta1, o.beta2, o.eps, o.weight_decay);
#endif
}

// ---------------------------------------------------------------- param_groups

std::vector<OptimizerParamGroup> Optimizer::param_groups() {
  std::vector<OptimizerParamGroup> groups;
  for (size_t g = 0; g < num_param_groups(); ++g) groups.emplace_back(this, g);
  return groups;
}

std::vector<Tensor> OptimizerParamGroup::params() const { return opt_->param_group_params(group_); }
double OptimizerParamGroup::Options::lr() const { return opt_->param_group_lr(group_); }
OptimizerParamGroup::Options& OptimizerParamGroup::Options::lr(double value) {
  opt_->set_param_group_lr(group_, value);
  return *this;
}

}  // namespace volt::nn
