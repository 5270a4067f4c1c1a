// Learning-rate schedulers, stepped once per epoch as in PyTorch.
//
//   volt::nn::Adadelta opt(net->parameters(), {.lr = 1.0});
//   volt::nn::StepLR scheduler(opt, /*step_size=*/1, /*gamma=*/0.7);
//   for (int epoch = 1; epoch <= 14; ++epoch) {
//     train(...);        // uses opt.lr(): 1.0, then 0.7, 0.49, ...
//     scheduler.step();
//   }
//
// A scheduler only sets the optimizer's learning rate (Optimizer::set_lr); a
// new schedule is one class with its rule in next_lr.
#pragma once
#include <cstdint>

#include <volt/nn/optim.h>

namespace volt::nn {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer) : opt_(optimizer), base_lr_(optimizer.lr()) {}
  virtual ~LRScheduler() = default;
  // Ends an epoch: the optimizer's learning rate becomes the next epoch's.
  void step() {
    ++epoch_;
    opt_.set_lr(next_lr(opt_.lr(), epoch_));
  }
  double get_last_lr() const { return opt_.lr(); }
  int64_t last_epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }

 protected:
  // The learning rate of `epoch` (1 after the first step), given the current one.
  virtual double next_lr(double current, int64_t epoch) const = 0;

 private:
  Optimizer& opt_;
  double base_lr_;
  int64_t epoch_ = 0;
};

// lr is multiplied by gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double next_lr(double current, int64_t epoch) const override {
    return epoch % step_size_ == 0 ? current * gamma_ : current;
  }

 private:
  int64_t step_size_;
  double gamma_;
};

// lr is multiplied by gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double next_lr(double current, int64_t) const override { return current * gamma_; }

 private:
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
// (PyTorch's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double next_lr(double current, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace volt::nn

// LibTorch's spelling: torch::optim::StepLR is volt::optim::StepLR.
namespace volt::optim {
using nn::CosineAnnealingLR;
using nn::ExponentialLR;
using nn::LRScheduler;
using nn::StepLR;
}  // namespace volt::optim
