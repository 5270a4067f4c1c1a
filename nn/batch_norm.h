// Dropout2d, BatchNorm1d and BatchNorm2d, as PyTorch defines them.
//
//   auto bn = std::make_shared<volt::nn::BatchNorm2d>(16);   // eps 1e-5, momentum 0.1
//   Tensor y = (*bn)(x);   // x: (N, 16, H, W); training: batch statistics, running ones updated
//   bn->eval();            // now the running statistics
//   auto drop = std::make_shared<volt::nn::Dropout2d>(0.5);  // whole channels zeroed
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>

namespace volt::nn {

// In training, zeroes each channel (each (n, c) plane of (N, C, H, W), or each c
// of (C, H, W)) with probability p and scales the rest by 1/(1-p); in eval the
// identity.  The mask comes from the global Philox generator.
class Dropout2d : public Module, public Holder<Dropout2d> {
 public:
  // Empty until assigned (nn/holder.h): Dropout2d layer{nullptr};
  explicit Dropout2d(std::nullptr_t) : Module("Dropout2d"), Holder<Dropout2d>(nullptr), p_(0) {}
  using Holder<Dropout2d>::operator=;
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;  // x: (N, C, H, W) or (C, H, W) -> same shape
  std::string extra_repr() const override;   // "p=0.5, inplace=False"
  double p() const { return p_; }

 private:
  double p_;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) running + momentum * batch statistic
  bool affine = true;     // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over channel dim 1.  In
// training mean and var are the batch's (var biased), and the running mean and
// var (unbiased) are updated; in eval the running ones are used.  Buffers as
// PyTorch names them: running_mean, running_var, num_batches_tracked.
class BatchNorm : public Module {
 public:
  // dims: the input ranks accepted, e.g. 2 or 3 for BatchNorm1d; name: for printing and errors.
  BatchNorm(const char* name, int64_t num_features, BatchNormOptions options, int min_dim, int max_dim);
  // An empty one, for BatchNorm1d{nullptr} (nn/holder.h).
  explicit BatchNorm(const char* name) : Module(name), name_(name), num_features_(0), min_dim_(0), max_dim_(0) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True"

  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 private:
  const char* name_;
  int64_t num_features_;
  BatchNormOptions options_;
  int min_dim_, max_dim_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

// x: (N, C) or (N, C, L)
class BatchNorm1d : public BatchNorm, public Holder<BatchNorm1d> {
 public:
  // Empty until assigned (nn/holder.h): BatchNorm1d layer{nullptr};
  explicit BatchNorm1d(std::nullptr_t) : BatchNorm("BatchNorm1d"), Holder<BatchNorm1d>(nullptr) {}
  using Holder<BatchNorm1d>::operator=;
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm("BatchNorm1d", num_features, options, 2, 3) {}
};

// x: (N, C, H, W)
class BatchNorm2d : public BatchNorm, public Holder<BatchNorm2d> {
 public:
  // Empty until assigned (nn/holder.h): BatchNorm2d layer{nullptr};
  explicit BatchNorm2d(std::nullptr_t) : BatchNorm("BatchNorm2d"), Holder<BatchNorm2d>(nullptr) {}
  using Holder<BatchNorm2d>::operator=;
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm("BatchNorm2d", num_features, options, 4, 4) {}
};

}  // namespace volt::nn
