#include <volt/nn/lr_schedule.h>

#include <cmath>

#include <volt/tensor/error.h>

namespace volt::nn {

WarmupCosineLR::WarmupCosineLR(WarmupCosineOptions o) : options_(o) {
  VOLT_CHECK(o.warmup >= 0, "WarmupCosineLR", "warmup must be >= 0, got " << o.warmup);
  VOLT_CHECK(o.decay_steps >= o.warmup, "WarmupCosineLR",
             "decay_steps must be >= warmup, got decay_steps " << o.decay_steps << " and warmup " << o.warmup);
  VOLT_CHECK(o.min_lr >= 0 && o.max_lr >= o.min_lr, "WarmupCosineLR",
             "expected 0 <= min_lr <= max_lr, got min_lr " << o.min_lr << " and max_lr " << o.max_lr);
}

double WarmupCosineLR::lr(int64_t step) const {
  const auto& o = options_;
  VOLT_CHECK(step >= 0, "WarmupCosineLR", "step must be >= 0, got " << step);
  if (step < o.warmup) return o.max_lr * static_cast<double>(step) / static_cast<double>(o.warmup);
  if (step > o.decay_steps) return o.min_lr;
  if (o.decay_steps == o.warmup) return o.max_lr;  // no decay phase: the step at the peak
  const double pi = std::acos(-1.0);
  const double ratio = static_cast<double>(step - o.warmup) / static_cast<double>(o.decay_steps - o.warmup);
  return o.min_lr + 0.5 * (1.0 + std::cos(pi * ratio)) * (o.max_lr - o.min_lr);
}

}  // namespace volt::nn
