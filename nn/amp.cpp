#include <volt/nn/amp.h>

#include <cmath>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/error.h>
#include <volt/tensor/ops.h>

namespace volt::amp {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  VOLT_CHECK(std::isfinite(options_.init_scale) && options_.init_scale > 0, "GradScaler",
             "init_scale must be a finite number > 0, got " << options_.init_scale);
  VOLT_CHECK(std::isfinite(options_.growth_factor) && options_.growth_factor > 1.0, "GradScaler",
             "growth_factor must be a finite number > 1, got " << options_.growth_factor);
  VOLT_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1.0, "GradScaler",
             "backoff_factor must be in (0, 1), got " << options_.backoff_factor);
  VOLT_CHECK(options_.growth_interval >= 1, "GradScaler",
             "growth_interval must be at least 1, got " << options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  VOLT_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler.scale",
             "expected a floating-point loss, got " << (loss.defined() ? loss.meta_str() : std::string("undefined")));
  if (!options_.enabled) return loss;
  return mul(loss, scale_);
}

void GradScaler::unscale(nn::Optimizer& opt) {
  if (!options_.enabled) return;
  VOLT_CHECK(!unscaled_, "GradScaler.unscale",
             "unscale was already called since the last update(); call update() after every step");
  unscaled_ = true;
  found_inf_ = false;
  const double inv = 1.0 / scale_;  // a power of two while the factors are: exact
  NoGradGuard no_grad;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // The largest magnitude is Inf or NaN exactly when some element is (amax keeps NaN).
    const double m = amax(abs(g)).item_double();
    if (!std::isfinite(m)) found_inf_ = true;
    g.mul_(inv);
  }
}

bool GradScaler::step(nn::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  VOLT_CHECK(!stepped_, "GradScaler.step", "step was already called since the last update(); call update() after every step");
  if (!unscaled_) unscale(opt);
  stepped_ = true;
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  VOLT_CHECK(stepped_, "GradScaler.update", "expected a call of step(optimizer) since the last update()");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
  } else if (++clean_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  unscaled_ = stepped_ = false;  // found_inf() still tells of this step
}

}  // namespace volt::amp
