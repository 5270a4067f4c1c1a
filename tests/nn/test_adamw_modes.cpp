// AdamW with gradient clipping and a learning-rate schedule in every mode:
// eager, the compiled training step (one program: clipping reads nothing back),
// the lazy device and CUDA, each against eager CPU over the same steps.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/functional.h>
#include <volt/nn/lr_schedule.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#ifdef VOLT_WITH_CUDA
#include "cuda/skip_without_gpu.h"
#endif
#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

constexpr int kSteps = 5;
constexpr double kMaxNorm = 0.5;  // below the first steps' norms: clipping is at work

std::shared_ptr<nn::MLP> make_net(double dropout) {
  manual_seed(7);
  return std::make_shared<nn::MLP>(20, std::vector<int64_t>{32, 16, 5}, true, dropout);
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches() {
  manual_seed(99);
  std::vector<Batch> r;
  for (int i = 0; i < kSteps; ++i) r.push_back({Tensor::randn({8, 20}) * 3.0, Tensor::randint(0, 5, {8})});
  return r;
}

// nanoGPT's optimizer: decay on the weights only, betas (0.9, 0.95).
std::unique_ptr<nn::AdamW> make_opt(nn::MLP& net) {
  return std::make_unique<nn::AdamW>(nn::weight_decay_groups(net.parameters(), 0.1),
                                     nn::AdamWOptions{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95});
}

const nn::WarmupCosineLR kSchedule({.max_lr = 1e-2, .min_lr = 1e-3, .warmup = 2, .decay_steps = 4});

// The step as an eager loop writes it: (loss, the norm before clipping).
std::vector<Tensor> train_step(nn::MLP& net, nn::AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  Tensor norm = nn::utils::clip_grad_norm_(net.parameters(), kMaxNorm);
  opt.step();
  return {loss, norm};
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<Tensor> params;  // on the CPU
};

// Eager CPU steps from the same start and random state: the reference.
Run run_eager(const std::vector<Batch>& data, double dropout) {
  auto net = make_net(dropout);
  auto opt = make_opt(*net);
  Run r;
  manual_seed(1234);
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    auto out = train_step(*net, *opt, data[i].x, data[i].y);
    r.losses.push_back(out[0].item_double());
    r.norms.push_back(out[1].item_double());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach());
  return r;
}

void check_same_run(const Run& got, const Run& want, double tol) {
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got.losses[i] - want.losses[i]) < tol);
    CHECK(std::fabs(got.norms[i] - want.norms[i]) < tol * std::max(1.0, want.norms[i]));
  }
  for (size_t i = 0; i < want.params.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(got.params[i], want.params[i]) < tol);
  }
}

// The step compiled (volt::jit::compile_step) on `device`.
Run run_compiled(const std::vector<Batch>& data, double dropout, Device device, jit::CompiledStep** keep_stats,
                 std::unique_ptr<jit::CompiledStep>& keep) {
  auto net = make_net(dropout);
  net->to(device);
  auto opt = make_opt(*net);
  keep = std::make_unique<jit::CompiledStep>(jit::compile_step(
      [&](const std::vector<Tensor>& in) { return train_step(*net, *opt, in[0], in[1]); }, {.state = {*net, *opt}}));
  Run r;
  manual_seed(1234);
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    auto out = (*keep)({data[i].x.to(device), data[i].y.to(device)});
    r.losses.push_back(out[0].item_double());
    r.norms.push_back(out[1].item_double());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().to(kCPU));
  if (keep_stats) *keep_stats = keep.get();
  return r;
}

}  // namespace

TEST_CASE("AdamW + clip_grad_norm_ + schedule: the compiled step equals eager over 5 steps, as one program") {
  auto data = make_batches();
  const Run eager = run_eager(data, 0.2);
  CHECK(eager.norms[0] > kMaxNorm);  // the clipping branch is exercised
  std::unique_ptr<jit::CompiledStep> keep;
  jit::CompiledStep* step = nullptr;
  const Run compiled = run_compiled(data, 0.2, kCPU, &step, keep);
  check_same_run(compiled, eager, 1e-5);
  // The learning rate changed every step (a run-time scalar) and clipping read
  // nothing back: one compilation, then cache hits.
  CHECK(step->compiles() == 1);
  CHECK(step->cache_hits() == kSteps - 1);
  // Parameters, AdamW's two moments each, its step count and one lr per group.
  CHECK(step->last_traces().back().inputs.size() == 3 * 6 + 1 + 2 + 2);
}

TEST_CASE("AdamW + clip_grad_norm_ + schedule on the lazy device equal eager over 5 steps, one graph") {
  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
  auto data = make_batches();
  const Run eager = run_eager(data, 0.0);
  auto net = make_net(0.0);
  net->to(kLazy);
  auto opt = make_opt(*net);
  Run lazy_run;
  std::vector<Tensor> losses, norms;
  manual_seed(1234);
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    auto out = train_step(*net, *opt, data[i].x.to(kLazy), data[i].y.to(kLazy));
    lazy::mark_step();
    lazy_run.losses.push_back(out[0].item_double());  // computed by the step's graph
    lazy_run.norms.push_back(out[1].item_double());
  }
  for (const Tensor& p : net->parameters()) lazy_run.params.push_back(p.detach().to(kCPU));
  check_same_run(lazy_run, eager, 1e-5);
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("CachedCompile") == kSteps - 1);
  CHECK(lazy::metrics::counter_value("RunGraph.value_needed") == 0);
}

TEST_CASE("clip_grad_value_ inside a compiled step equals eager") {
  auto data = make_batches();
  auto run = [&](bool compiled) {
    auto net = make_net(0.0);
    auto opt = make_opt(*net);
    auto fn = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = nn::functional::cross_entropy((*net)(x), y);
      opt->zero_grad();
      loss.backward();
      nn::utils::clip_grad_value_(net->parameters(), 0.05);
      opt->step();
      return loss;
    };
    std::unique_ptr<jit::CompiledStep> step;
    if (compiled) step = std::make_unique<jit::CompiledStep>(jit::compile_step(fn, {.state = {*net, *opt}}));
    for (int i = 0; i < kSteps; ++i) compiled ? (*step)(data[i].x, data[i].y) : fn(data[i].x, data[i].y);
    std::vector<Tensor> params;
    for (const Tensor& p : net->parameters()) params.push_back(p.detach());
    return params;
  };
  auto eager = run(false), compiled = run(true);
  for (size_t i = 0; i < eager.size(); ++i) CHECK(max_abs_diff(compiled[i], eager[i]) < 1e-5);
}

#ifdef VOLT_WITH_CUDA

TEST_CASE("cuda: AdamW, clipping and the schedule on the GPU equal the CPU, eager and compiled") {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  auto data = make_batches();
  const Run cpu = run_eager(data, 0.0);
  // Eager on the GPU: the decay kernel, the fused Adam launch, clipping as ops.
  auto net = make_net(0.0);
  net->to(gpu);
  auto opt = make_opt(*net);
  Run eager;
  manual_seed(1234);
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    auto out = train_step(*net, *opt, data[i].x.to(gpu), data[i].y.to(gpu));
    CHECK(out[1].device() == gpu);
    eager.losses.push_back(out[0].item_double());
    eager.norms.push_back(out[1].item_double());
  }
  for (const Tensor& p : net->parameters()) eager.params.push_back(p.detach().to(kCPU));
  check_same_run(eager, cpu, 1e-5);
  std::unique_ptr<jit::CompiledStep> keep;
  jit::CompiledStep* step = nullptr;
  const Run compiled = run_compiled(data, 0.0, gpu, &step, keep);
  check_same_run(compiled, cpu, 1e-5);
  CHECK(step->compiles() == 1);
  // Clipping read nothing back to the host: the step replays as one CUDA graph.
  CHECK(step->ran_as_graph());
}

#endif
