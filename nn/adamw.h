// AdamW: Adam with decoupled weight decay, and parameter groups.
//
//   auto groups = volt::nn::weight_decay_groups(model->parameters(), /*weight_decay=*/0.1);
//   volt::nn::AdamW opt(groups, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});
//   opt.set_lr(schedule(step));   // every group's learning rate (nn/lr_schedule.h)
//   opt.step();
//
// The rule is PyTorch's: with t the step count (1 on the first step), for each
// parameter of a group with learning rate lr and weight decay wd,
//   p *= 1 - lr * wd                       (decoupled: not through the moments)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// On the CPU it is Adam's one pass over each parameter's memory (the decay in
// it); on CUDA an elementwise kernel per decayed parameter, then Adam's one
// fused launch for all; elsewhere (the lazy device) tensor ops; under volt::jit::compile_step the same rule as volt ops,
// each group's learning rate a run-time scalar.  A group's weight decay is
// fixed when the optimizer is made.
#pragma once
#include <cstddef>
#include <optional>
#include <tuple>
#include <vector>

#include <volt/nn/optim.h>
#include <volt/nn/option_builder.h>

namespace volt::nn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Parameters that share a learning rate and weight decay; an unset one is the
// optimizer's (AdamWOptions).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// nanoGPT's two groups: the parameters with 2 or more dims (matmul weights,
// embeddings) decayed by weight_decay, the others (biases, norms' gains) not.
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);

class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
  void step() override;
  const AdamWOptions& options() const { return options_; }

  // The first group's learning rate; set_lr sets every group's (a schedule).
  double lr() const override;
  void set_lr(double lr) override;
  size_t num_groups() const { return groups_.size(); }
  double group_lr(size_t group) const { return groups_.at(group).lr; }
  void set_group_lr(size_t group, double lr);
  double group_weight_decay(size_t group) const { return groups_.at(group).weight_decay; }
  // Group g's parameters are params()[group_begin(g) .. group_begin(g) + group_size(g)).
  size_t group_begin(size_t group) const { return groups_.at(group).begin; }
  size_t group_size(size_t group) const { return groups_.at(group).end - groups_.at(group).begin; }

  std::vector<RunTimeScalar> run_time_scalars() override;
  // param_groups() (nn/optim.h) lists these groups.
  size_t num_param_groups() const override { return num_groups(); }
  std::vector<Tensor> param_group_params(size_t group) const override {
    return {params_.begin() + group_begin(group), params_.begin() + group_begin(group) + group_size(group)};
  }
  double param_group_lr(size_t group) const override { return group_lr(group); }
  void set_param_group_lr(size_t group, double value) override { set_group_lr(group, value); }

 private:
  struct Group {
    size_t begin = 0, end = 0;  // into params_
    double lr = 0, weight_decay = 0;
    Tensor lr_tensor;  // 0-d f64, for a traced step (run_time_scalars)
  };
  void check_options() const;
  void traced_step();
  AdamWOptions options_;
  std::vector<Group> groups_;
};

}  // namespace volt::nn

namespace volt::optim {
using nn::AdamW;
using nn::ParamGroup;
using nn::weight_decay_groups;

// LibTorch's builder spelling, as the others in nn/optim_options.h:
//   volt::optim::AdamW opt(net->parameters(), volt::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
// It converts to volt::nn::AdamWOptions, whose defaults (LibTorch's too) it starts from.
class AdamWOptions {
 public:
  AdamWOptions(double lr = 1e-3) { o_.lr = lr; }
  VOLT_OPTION(AdamWOptions, lr)
  VOLT_OPTION(AdamWOptions, eps)
  VOLT_OPTION(AdamWOptions, weight_decay)
  AdamWOptions& betas(const std::tuple<double, double>& b) {
    o_.beta1 = std::get<0>(b);
    o_.beta2 = std::get<1>(b);
    return *this;
  }
  std::tuple<double, double> betas() const { return {o_.beta1, o_.beta2}; }
  operator const nn::AdamWOptions&() const { return o_; }

 private:
  nn::AdamWOptions o_;
};
}  // namespace volt::optim
