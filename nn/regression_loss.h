// volt::nn::MSELoss, SmoothL1Loss and BCEWithLogitsLoss, with LibTorch's option
// builders, and their functional forms (the rules: tensor/losses.h).
//
//   volt::nn::SmoothL1Loss loss_fn(volt::nn::SmoothL1LossOptions().beta(0.5));
//   volt::Tensor loss = loss_fn(pred, target);        // pred, target: (N) -> ()
//   volt::nn::BCEWithLogitsLoss bce(volt::nn::BCEWithLogitsLossOptions().pos_weight(volt::tensor({2.0})));
//   namespace F = volt::nn::functional;
//   volt::Tensor mse = F::mse_loss(pred, target);     // F::MSELossFuncOptions(volt::kSum) sums
#pragma once
#include <cstddef>
#include <optional>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>
#include <volt/tensor/losses.h>

namespace volt::nn {

class MSELossOptions {
 public:
  MSELossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}  // NOLINT: LibTorch's implicit form
  MSELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class SmoothL1LossOptions {
 public:
  SmoothL1LossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}  // NOLINT: as LibTorch
  SmoothL1LossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  SmoothL1LossOptions& beta(double b) {
    beta_ = b;
    return *this;
  }
  Reduction reduction() const { return reduction_; }
  double beta() const { return beta_; }

 private:
  Reduction reduction_;
  double beta_ = 1.0;
};

class BCEWithLogitsLossOptions {
 public:
  BCEWithLogitsLossOptions& weight(const Tensor& w) {
    o_.weight = w;
    return *this;
  }
  BCEWithLogitsLossOptions& pos_weight(const Tensor& w) {
    o_.pos_weight = w;
    return *this;
  }
  BCEWithLogitsLossOptions& reduction(Reduction r) {
    o_.reduction = r;
    return *this;
  }
  const Tensor& weight() const { return o_.weight; }
  const Tensor& pos_weight() const { return o_.pos_weight; }
  Reduction reduction() const { return o_.reduction; }
  operator const BCEWithLogitsOptions&() const { return o_; }  // NOLINT: passed where the options are taken

 private:
  BCEWithLogitsOptions o_;
};

// The three losses take (input, target) of one shape; called with one input they say so.
class MSELoss : public Module, public Holder<MSELoss> {
 public:
  explicit MSELoss(std::nullptr_t) : Module("MSELoss"), Holder<MSELoss>(nullptr) {}
  explicit MSELoss(const MSELossOptions& options = {}) : Module("MSELoss"), options_(options) {}
  using Holder<MSELoss>::operator=;
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Tensor forward(const Tensor& x) override;
  using Module::operator();
  const MSELossOptions& options() const { return options_; }

 private:
  MSELossOptions options_;
};

class SmoothL1Loss : public Module, public Holder<SmoothL1Loss> {
 public:
  explicit SmoothL1Loss(std::nullptr_t) : Module("SmoothL1Loss"), Holder<SmoothL1Loss>(nullptr) {}
  explicit SmoothL1Loss(const SmoothL1LossOptions& options = {}) : Module("SmoothL1Loss"), options_(options) {}
  using Holder<SmoothL1Loss>::operator=;
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Tensor forward(const Tensor& x) override;
  using Module::operator();
  const SmoothL1LossOptions& options() const { return options_; }

 private:
  SmoothL1LossOptions options_;
};

class BCEWithLogitsLoss : public Module, public Holder<BCEWithLogitsLoss> {
 public:
  explicit BCEWithLogitsLoss(std::nullptr_t) : Module("BCEWithLogitsLoss"), Holder<BCEWithLogitsLoss>(nullptr) {}
  explicit BCEWithLogitsLoss(const BCEWithLogitsLossOptions& options = {})
      : Module("BCEWithLogitsLoss"), options_(options) {}
  using Holder<BCEWithLogitsLoss>::operator=;
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Tensor forward(const Tensor& x) override;
  using Module::operator();
  const BCEWithLogitsLossOptions& options() const { return options_; }

 private:
  BCEWithLogitsLossOptions options_;
};

}  // namespace volt::nn

namespace volt::nn::functional {

using MSELossFuncOptions = MSELossOptions;
using SmoothL1LossFuncOptions = SmoothL1LossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;

inline Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options = {}) {
  return volt::mse_loss(input, target, options.reduction());
}
// beta given here wins over options.beta() (LibTorch's newer rule; 1.13 read only this argument, default 1).
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& options = {},
                             std::optional<double> beta = std::nullopt) {
  return volt::smooth_l1_loss(input, target, options.reduction(), beta.value_or(options.beta()));
}
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const BinaryCrossEntropyWithLogitsFuncOptions& options = {}) {
  return volt::binary_cross_entropy_with_logits(input, target, options);
}

}  // namespace volt::nn::functional
