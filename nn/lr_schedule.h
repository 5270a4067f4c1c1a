// Learning rate by training step: linear warm-up, then cosine decay (nanoGPT's get_lr).
//
//   volt::nn::WarmupCosineLR schedule({.max_lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .decay_steps = 2000});
//   for (int64_t step = 0; step < steps; ++step) {
//     opt.set_lr(schedule(step));   // a run-time scalar: a compiled step does not recompile
//     ...
//   }
//
//   step < warmup:                 max_lr * step / warmup           (0 at step 0)
//   warmup <= step <= decay_steps:  min_lr + (max_lr - min_lr) (1 + cos(pi r)) / 2,
//                                   r = (step - warmup) / (decay_steps - warmup)
//   step > decay_steps:            min_lr
// Unlike the epoch schedulers of nn/lr_scheduler.h it is a pure function of
// the step, so a resumed run asks it for the step it resumes at.
#pragma once
#include <cstdint>

namespace volt::nn {

struct WarmupCosineOptions {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 100;        // steps of linear warm-up from 0
  int64_t decay_steps = 5000;  // the step at which min_lr is reached
};

class WarmupCosineLR {
 public:
  explicit WarmupCosineLR(WarmupCosineOptions options);
  double lr(int64_t step) const;
  double operator()(int64_t step) const { return lr(step); }
  const WarmupCosineOptions& options() const { return options_; }

 private:
  WarmupCosineOptions options_;
};

}  // namespace volt::nn

namespace volt::optim {
using nn::WarmupCosineLR;
using nn::WarmupCosineOptions;
}  // namespace volt::optim
