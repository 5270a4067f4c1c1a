#include <volt/nn/adamw.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>
#include <utility>

#include <volt/nn/optim_detail.h>
#include <volt/tensor/cuda/optim.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

using namespace detail;

namespace {

std::vector<Tensor> flatten(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> all;
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = groups[g].params[i];
      VOLT_CHECK(p.defined(), "AdamW", "parameter " << i << " of group " << g << " is undefined");
      VOLT_CHECK(seen.insert(p.impl()).second, "AdamW",
                 "parameter " << i << " of group " << g << " (" << p.meta_str()
                              << ") is already in an earlier group; each parameter belongs to one group");
      all.push_back(p);
    }
  return all;
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{.params = {}, .lr = std::nullopt, .weight_decay = weight_decay};
  ParamGroup no_decay{.params = {}, .lr = std::nullopt, .weight_decay = 0.0};
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{.params = std::move(params), .lr = {}, .weight_decay = {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : AdamBase(flatten(groups)), options_(defaults) {
  check_options();
  size_t at = 0;
  for (const ParamGroup& pg : groups) {
    Group g;
    g.begin = at;
    g.end = at += pg.params.size();
    g.lr = pg.lr.value_or(defaults.lr);
    g.weight_decay = pg.weight_decay.value_or(defaults.weight_decay);
    // Finite too: an infinite rate or decay would turn every weight into NaN.
    VOLT_CHECK(std::isfinite(g.lr) && g.lr >= 0, "AdamW",
               "lr must be >= 0 and finite, got " << g.lr << " for group " << groups_.size());
    VOLT_CHECK(std::isfinite(g.weight_decay) && g.weight_decay >= 0, "AdamW",
               "weight_decay must be >= 0 and finite, got " << g.weight_decay << " for group " << groups_.size());
    groups_.push_back(g);
  }
}

void AdamW::check_options() const {
  const auto& o = options_;
  check_non_negative(o.lr, "AdamW", "lr");
  VOLT_CHECK(o.beta1 >= 0 && o.beta1 < 1, "AdamW", "beta1 must be in [0, 1), got " << o.beta1);
  VOLT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "AdamW", "beta2 must be in [0, 1), got " << o.beta2);
  check_non_negative(o.eps, "AdamW", "eps");
  check_non_negative(o.weight_decay, "AdamW", "weight_decay");
}

double AdamW::lr() const { return groups_.empty() ? options_.lr : groups_[0].lr; }

void AdamW::set_lr(double lr) {
  check_non_negative(lr, "AdamW", "lr");
  options_.lr = lr;
  for (Group& g : groups_) g.lr = lr;
}

void AdamW::set_group_lr(size_t group, double lr) {
  VOLT_CHECK(group < groups_.size(), "AdamW",
             "group " << group << " is out of range for an optimizer of " << groups_.size() << " groups");
  check_non_negative(lr, "AdamW", "lr");
  groups_[group].lr = lr;
}

std::vector<Optimizer::RunTimeScalar> AdamW::run_time_scalars() {
  std::vector<RunTimeScalar> r;
  if (params_.empty()) return r;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    if (!group.lr_tensor.defined()) group.lr_tensor = scalar_f64(group.lr, params_[0]);
    r.push_back({group.lr_tensor, [this, g] { return groups_[g].lr; }});
  }
  return r;
}

// The rule of step() as volt ops, in the same order of operations, read by a
// tracer.  The step count and the groups' learning rates are tensors, so the
// bias corrections and the decay are computed when the compiled step runs.
void AdamW::traced_step() {
  const auto& o = options_;
  step_.copy_(step_ + 1.0);
  const Tensor bias_correction1 = 1.0 - pow(o.beta1, step_);
  const Tensor bias_correction2_sqrt = sqrt(1.0 - pow(o.beta2, step_));
  for (const Group& group : groups_) {
    // The group's constants, rounded once per dtype before any update, so a
    // compiler can fuse the updates of same-shaped parameters into one pass.
    struct Constants {
      DType dtype;
      Tensor neg_step_size, bias_correction2_sqrt, decay;
    };
    std::vector<Constants> constants;
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined() ||
          std::any_of(constants.begin(), constants.end(), [&](const Constants& c) { return c.dtype == p.dtype(); }))
        continue;
      Constants c{p.dtype(), (-(group.lr_tensor / bias_correction1)).to(p.dtype()), bias_correction2_sqrt.to(p.dtype()),
                  Tensor()};
      if (group.weight_decay != 0) c.decay = (1.0 - group.lr_tensor * group.weight_decay).to(p.dtype());
      constants.push_back(c);
    }
    for (size_t i = group.begin; i < group.end; ++i) {
      Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      Tensor g = grad_like(p);
      State& s = state_[i];
      const Constants& c =
          *std::find_if(constants.begin(), constants.end(), [&](const Constants& k) { return k.dtype == p.dtype(); });
      const Tensor decayed = group.weight_decay != 0 ? p * c.decay : p;
      s.m.copy_(s.m + (1.0 - o.beta1) * (g - s.m));
      s.v.copy_(s.v * o.beta2 + ((1.0 - o.beta2) * g) * g);
      p.copy_(decayed + (c.neg_step_size * s.m) / (sqrt(s.v) / c.bias_correction2_sqrt + o.eps));
    }
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  if (traced(params_)) {
    const bool ready = step_.defined() && std::all_of(groups_.begin(), groups_.end(),
                                                      [](const Group& g) { return g.lr_tensor.defined(); });
    VOLT_CHECK(ready, "AdamW",
               "step() is being traced without its run-time state; pass the optimizer to "
               "volt::jit::compile_step as state");
    traced_step();
    return;
  }
  const auto& o = options_;
  // Once a compiled step made the step-count tensor, it is the count.
  const int64_t counted = step_.defined() ? static_cast<int64_t>(step_.item_double()) : -1;
  std::vector<AdamHostSlot> host_slots;    // CPU parameters: one pass below
  std::vector<cuda::AdamSlot> cuda_slots;  // CUDA parameters: one fused launch below
  for (const Group& group : groups_) {
    for (size_t i = group.begin; i < group.end; ++i) {
      Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor low = host_bf16_copy(p);
      p.mark_modified();  // written in place below, some paths through data_ptr
      Tensor g = grad_like(p);
      State& s = ready_state(i);
      s.step = counted >= 0 ? counted + 1 : s.step + 1;
      const double t = static_cast<double>(s.step);
      const double step_size = group.lr / (1.0 - std::pow(o.beta1, t));
      const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
      const double decay = 1.0 - group.lr * group.weight_decay;

      if (cuda_fused_path(p)) {
        if (group.weight_decay != 0) p.mul_(decay);
        cuda_slots.push_back({p, g, s.m, s.v, step_size, bias_correction2_sqrt});
        continue;
      }
      if (host_fast_path(p)) {
        host_slots.push_back({p, g, s.m, s.v, step_size, bias_correction2_sqrt, decay, low});
        continue;
      }
      // Other devices (lazy; CUDA parameters that are not contiguous): the
      // same rule as tensor ops.
      if (group.weight_decay != 0) p.mul_(decay);
      s.m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
      s.v.mul_(o.beta2).add_(g * g, 1.0 - o.beta2);
      p.add_(s.m / (volt::sqrt(s.v) / bias_correction2_sqrt + o.eps), -step_size);
    }
  }
  adam_host_step(host_slots, o.beta1, o.beta2, o.eps, /*weight_decay=*/0.0);
  if (counted >= 0) step_.fill_(static_cast<double>(counted + 1));
#ifdef VOLT_WITH_CUDA
  if (!cuda_slots.empty()) cuda::fused_adam(cuda_slots, o.beta1, o.beta2, o.eps, /*weight_decay=*/0.0);
#endif
}

}  // namespace volt::nn
