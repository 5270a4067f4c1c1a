#include <volt/nn/lr_scheduler.h>

#include <cmath>

#include <volt/nn/optim_detail.h>

namespace volt::nn {

namespace {
// A schedule's factor: > 0 and finite (0, a negative or an infinite one would
// make the learning rate 0, negative or NaN).
void check_gamma(double gamma, const char* who) {
  VOLT_CHECK(std::isfinite(gamma) && gamma > 0, who, "gamma must be > 0 and finite, got " << gamma);
}
}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  VOLT_CHECK(step_size > 0, "StepLR", "step_size must be positive, got " << step_size);
  check_gamma(gamma, "StepLR");
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  check_gamma(gamma, "ExponentialLR");
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  VOLT_CHECK(t_max > 0, "CosineAnnealingLR", "T_max must be positive, got " << t_max);
  detail::check_non_negative(eta_min, "CosineAnnealingLR", "eta_min");
}

double CosineAnnealingLR::next_lr(double, int64_t epoch) const {
  const double pi = std::acos(-1.0);
  return eta_min_ + (base_lr() - eta_min_) * (1 + std::cos(pi * static_cast<double>(epoch) / t_max_)) / 2;
}

}  // namespace volt::nn
