// Optimizers: SGD (with momentum), Adam and Adadelta, with PyTorch's update rules
// (AdamW and parameter groups: nn/adamw.h; gradient clipping: nn/clip_grad.h).
//
//   volt::nn::Adam opt(net->parameters(), {.lr = 1e-3});
//   opt.zero_grad();
//   loss_fn(net->forward(x), y).backward();
//   opt.step();  // updates each parameter that has a grad, in place
//
// An optimizer holds the same Tensor handles as the module, so it follows a
// module moved by to(device) and a jitted module that shares its parameters.
// On the CPU a step is one pass over each parameter's memory (read p, g and
// the state, write p and the state) with no temporaries.  On CUDA one fused
// kernel launch updates every parameter (tensor/cuda/optim.h); elsewhere the
// same rule runs as a few in-place tensor ops.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <volt/nn/named_tensor.h>
#include <volt/tensor/tensor.h>

namespace volt::nn {


class Optimizer;

// LibTorch's view of an optimizer's parameter groups, for changing a learning
// rate by hand:
//   for (auto& group : opt.param_groups()) group.options().lr(group.options().lr() * 0.5);
// A group is a handle: its options() read and write the optimizer's own value.
class OptimizerParamGroup {
 public:
  class Options {
   public:
    Options(Optimizer* opt, size_t group) : opt_(opt), group_(group) {}
    double lr() const;
    Options& lr(double value);  // a learning rate >= 0, else volt::Error
    double get_lr() const { return lr(); }
    void set_lr(double value) { lr(value); }

   private:
    Optimizer* opt_;
    size_t group_;
  };
  OptimizerParamGroup(Optimizer* opt, size_t group) : options_(opt, group), opt_(opt), group_(group) {}
  std::vector<Tensor> params() const;
  Options& options() { return options_; }

 private:
  Options options_;
  Optimizer* opt_;
  size_t group_;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;

  void zero_grad();  // grads become undefined (PyTorch's set_to_none=True)
  virtual void step() = 0;
  const std::vector<Tensor>& params() const { return params_; }
  // The learning rate the next step uses (schedulers set it; nn/lr_scheduler.h).
  // A lazy or compiled step reads it as a run-time scalar: changing it does not recompile.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // The parameter groups (one holding every parameter, unless the optimizer
  // has several: nn/adamw.h), each a handle onto this optimizer.
  std::vector<OptimizerParamGroup> param_groups();
  virtual size_t num_param_groups() const { return 1; }
  virtual std::vector<Tensor> param_group_params(size_t) const { return params_; }
  virtual double param_group_lr(size_t) const { return lr(); }
  virtual void set_param_group_lr(size_t, double value) { set_lr(value); }

  // For a compiled training step (volt::jit::compile_step, which traces step()
  // with volt ops): the tensors step() updates besides the parameters (the
  // moments; the step count as a 0-d f64 tensor), made now if no step ran yet.
  virtual std::vector<Tensor> state_tensors() { return {}; }
  // Values a compiled step reads at run time: 0-d f64 tensors, each with the
  // function giving its current value (the learning rate).  The step refills
  // them before every call, so changing the learning rate does not recompile.
  using RunTimeScalar = std::pair<Tensor, std::function<double()>>;
  virtual std::vector<RunTimeScalar> run_time_scalars() { return {}; }

  // What a checkpoint keeps so that a resumed run goes on exactly (nn/checkpoint.h),
  // with PyTorch's names: "lr", "state.<i>.<name>" for parameter i (exp_avg,
  // exp_avg_sq, step, momentum_buffer, square_avg, acc_delta).  A parameter with
  // no state yet has no entries.  load_state_dict checks the whole dict first
  // (known names; each parameter's shape and dtype; every slot the optimizer
  // holds present; finite values; step a whole number >= 0; exp_avg_sq,
  // square_avg and acc_delta >= 0; lr finite >= 0) and lists every misfit in
  // one error, changing nothing; then it copies the tensors into the slots
  // the optimizer already holds, in place, so a compiled step that took their
  // handles (jit/step/step.h) sees the loaded state.  check_state_dict is the
  // check alone.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);
  void check_state_dict(const NamedTensors& state);

 protected:
  std::vector<Tensor> params_;
  // The learning rate as a 0-d f64 tensor in `slot` (made on first use), refilled
  // from lr() before every compiled step: what run_time_scalars returns.
  std::vector<RunTimeScalar> learning_rate_scalar(Tensor& slot);
  // Each optimizer's per-parameter state by name (nn/optim_state.cpp); an
  // undefined tensor is state not made yet.
  virtual std::vector<std::pair<std::string, Tensor*>> state_slots(size_t i) = 0;
  // After load_state_dict wrote the slots: anything derived from them.
  virtual void state_loaded() {}
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0
};

// PyTorch's rule: g += wd * p;  buf = g on the first step, else
// momentum * buf + (1 - dampening) g;  then g = g + momentum * buf (nesterov)
// or buf;  p -= lr * g  (buf is not used when momentum is 0).  A traced step
// (compile_step) takes dampening 0 only: its one program cannot tell the
// first step, whose buf is g undamped, from the others.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  std::vector<Tensor> state_tensors() override;
  std::vector<RunTimeScalar> run_time_scalars() override;

 private:
  void traced_step();
  std::vector<std::pair<std::string, Tensor*>> state_slots(size_t i) override;
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // one per parameter; undefined until its first step
  Tensor lr_;                     // 0-d f64, for a traced step (run_time_scalars)
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// What Adam and AdamW share: per parameter the moments m and v (zeros, made
// on first use and kept on the parameter's device) and the step count, an
// integer per parameter eagerly and one 0-d f64 tensor once a step was traced
// (then the truth); checkpoints under PyTorch's names (step, exp_avg, exp_avg_sq).
class AdamBase : public Optimizer {
 public:
  int64_t step_count(size_t i) const;
  std::vector<Tensor> state_tensors() override;
  const Tensor& exp_avg(size_t i) const { return state_.at(i).m; }
  const Tensor& exp_avg_sq(size_t i) const { return state_.at(i).v; }

 protected:
  explicit AdamBase(std::vector<Tensor> params);
  struct State {
    int64_t step = 0;
    Tensor m, v;        // first and second moments, same shape as the parameter
    Tensor saved_step;  // the step count as a 0-d f64 tensor, for state_dict
  };
  State& ready_state(size_t i);
  std::vector<std::pair<std::string, Tensor*>> state_slots(size_t i) override;
  void state_loaded() override;
  std::vector<State> state_;
  Tensor step_;  // 0-d f64: the step count of a traced step (the same for every parameter)
};

// With t the step count (1 on the first step) and g += wd * p first:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is lr * mhat / (sqrt(vhat) + eps), in the order PyTorch evaluates it.
class Adam : public AdamBase {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;
  const AdamOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  std::vector<RunTimeScalar> run_time_scalars() override;

 private:
  void traced_step();
  AdamOptions options_;
  Tensor lr_;  // 0-d f64: the learning rate of a traced step (run_time_scalars)
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
};

// With g += wd * p first, and s (square_avg) and d (acc_delta) starting at 0:
//   s = rho s + (1 - rho) g^2
//   delta = sqrt(d + eps) / sqrt(s + eps) * g
//   d = rho d + (1 - rho) delta^2
//   p -= lr * delta
class Adadelta : public Optimizer {
 public:
  Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {});
  void step() override;
  const AdadeltaOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const Tensor& square_avg(size_t i) const { return state_.at(i).square_avg; }
  const Tensor& acc_delta(size_t i) const { return state_.at(i).acc_delta; }
  std::vector<Tensor> state_tensors() override;
  std::vector<RunTimeScalar> run_time_scalars() override;

 private:
  struct State {
    Tensor square_avg, acc_delta;  // same shape as the parameter; undefined until its first step
  };
  void traced_step();
  Tensor lr_;  // 0-d f64, for a traced step (run_time_scalars)
  std::vector<std::pair<std::string, Tensor*>> state_slots(size_t i) override;
  AdadeltaOptions options_;
  std::vector<State> state_;
};

}  // namespace volt::nn

// LibTorch's spelling: torch::optim::Adam is volt::optim::Adam.
namespace volt::optim {
using nn::Adadelta;
using nn::Adam;
using nn::Optimizer;
using nn::OptimizerParamGroup;
using nn::SGD;
}  // namespace volt::optim

// Their options as builders: optim::SGDOptions(0.01).momentum(0.5).
#include <volt/nn/optim_options.h>
