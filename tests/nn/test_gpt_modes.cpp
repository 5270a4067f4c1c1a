// A 2-layer GPT trained 5 steps with AdamW, clipping and a schedule in every
// mode volt has: the module jit, the compiled step, the lazy device and (on a
// GPU or tests/cudasim) the compiled step as one graph launch, each against
// eager CPU from the same start and the same batches.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/gpt.h>
#include <volt/nn/lr_schedule.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/graph.h>
#include "cuda/skip_without_gpu.h"
#endif
#include "jit/row_kernels.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;
using volt::testing::row_kernels;

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 4, kBlock = 16, kVocab = 64;

std::shared_ptr<nn::GPT> make_gpt() {
  manual_seed(21);
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.block_size = kBlock, .vocab_size = kVocab, .n_layer = 2, .n_head = 2, .n_embd = 32});
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches() {
  manual_seed(77);
  std::vector<Batch> r;
  for (int i = 0; i < kSteps; ++i)
    r.push_back({Tensor::randint(0, kVocab, {kBatch, kBlock}), Tensor::randint(0, kVocab, {kBatch, kBlock})});
  return r;
}

std::unique_ptr<nn::AdamW> make_opt(nn::GPT& gpt) {
  return std::make_unique<nn::AdamW>(nn::weight_decay_groups(gpt.parameters(), 0.1),
                                     nn::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});
}

const nn::WarmupCosineLR kSchedule({.max_lr = 1e-3, .min_lr = 1e-4, .warmup = 2, .decay_steps = 4});

using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// One step as an eager loop writes it; `loss_of` is the model (eager or jitted).
Tensor train_step(const LossFn& loss_of, nn::GPT& gpt, nn::AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = loss_of(x, y);
  opt.zero_grad();
  loss.backward();
  nn::utils::clip_grad_norm_(gpt.parameters(), 1.0);
  opt.step();
  return loss;
}

struct Run {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU
};

Run finish(std::vector<double> losses, nn::GPT& gpt) {
  Run r{std::move(losses), {}};
  for (const Tensor& p : gpt.parameters()) r.params.push_back(p.detach().to(kCPU));
  return r;
}

Run run_eager(const std::vector<Batch>& data) {
  auto gpt = make_gpt();
  auto opt = make_opt(*gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) { return gpt->forward(x, y).loss; };
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x, data[i].y).item<double>());
  }
  return finish(losses, *gpt);
}

void check_same_run(const Run& got, const Run& want) {
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got.losses[i] - want.losses[i]) < 1e-5);
  }
  REQUIRE(got.params.size() == want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(got.params[i], want.params[i]) < 1e-5);
  }
}

jit::JitOptions named(const std::string& name) {
  jit::JitOptions options;
  options.name = name;
  return options;
}

// The GPT's loss as a jitted function of (idx, targets), sharing its parameters.
jit::JitFunction jit_loss(const std::shared_ptr<nn::GPT>& gpt) {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [n, p] : gpt->named_parameters()) {
    params.push_back(p);
    names.push_back(jit::proxy_name_for(n));
  }
  return jit::JitFunction([gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
                          {"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); }, named("GPT"));
}

// The model, optimizer and step of a compiled run: the step refers to the
// model and optimizer (their training flag and learning rate), so they live
// as long as it does.
struct Compiled {
  std::shared_ptr<nn::GPT> gpt;
  std::unique_ptr<nn::AdamW> opt;
  LossFn loss_of;
  std::unique_ptr<jit::CompiledStep> step;
};

Run run_compiled(const std::vector<Batch>& data, Device device, Compiled& c) {
  c.gpt = make_gpt();
  c.gpt->to(device);
  c.opt = make_opt(*c.gpt);
  c.loss_of = [&c](const Tensor& x, const Tensor& y) { return c.gpt->forward(x, y).loss; };
  c.step = std::make_unique<jit::CompiledStep>(jit::compile_step(
      [&c](const Tensor& x, const Tensor& y) { return train_step(c.loss_of, *c.gpt, *c.opt, x, y); },
      {.state = {*c.gpt, *c.opt}}));
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) {
    c.opt->set_lr(kSchedule(i + 1));
    losses.push_back((*c.step)(data[i].x.to(device), data[i].y.to(device)).item<double>());
  }
  return finish(losses, *c.gpt);
}

}  // namespace

TEST_CASE("GPT: the module jit equals eager over 5 AdamW steps with clipping; one compile") {
  auto data = make_batches();
  const Run eager = run_eager(data);
  auto gpt = make_gpt();
  auto opt = make_opt(*gpt);
  jit::JitFunction jitted = jit_loss(gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) { return jitted({x, y}).at(0); };
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x, data[i].y).item<double>());
  }
  check_same_run(finish(losses, *gpt), eager);
  CHECK(jit::cache_misses(jitted) == 1);
  CHECK(jit::cache_hits(jitted) == kSteps - 1);
  // The attention prints as prims: the score matmul, the mask, the softmax's row reduction.
  const std::string trace = jit::last_traces(jitted).back().str();
  CHECK(trace.find("matmul") != std::string::npos);
  CHECK(trace.find("where") != std::string::npos);
  // Every LayerNorm (2 per block, and the last) and the loss's log_softmax is
  // one row kernel each way; the attention's softmax is inside flash_attention.
  CHECK(row_kernels(jit::last_traces(jitted).back()) == std::pair<int, int>{5 + 1, 0});
  CHECK(row_kernels(jit::last_backward_traces(jitted).back()) == std::pair<int, int>{5 + 1, 0});
  CHECK(trace.find("flash_attention") != std::string::npos);
}

TEST_CASE("GPT: compile_step equals eager over 5 AdamW steps with clipping; one compile") {
  auto data = make_batches();
  const Run eager = run_eager(data);
  Compiled c;
  check_same_run(run_compiled(data, kCPU, c), eager);
  CHECK(c.step->compiles() == 1);
  CHECK(c.step->cache_hits() == kSteps - 1);
  // Forward and backward in one program: 2 x (5 LayerNorms + the loss's log_softmax).
  CHECK(row_kernels(c.step->last_traces().back()) == std::pair<int, int>{12, 0});
}

TEST_CASE("GPT: the lazy device equals eager over 5 AdamW steps with clipping; compiles do not grow with the steps") {
  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
  auto data = make_batches();
  const Run eager = run_eager(data);
  auto gpt = make_gpt();
  gpt->to(kLazy);
  auto opt = make_opt(*gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) { return gpt->forward(x, y).loss; };
  std::vector<Tensor> losses;
  for (int i = 0; i < kSteps; ++i) {
    opt->set_lr(kSchedule(i + 1));
    losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x.to(kLazy), data[i].y.to(kLazy)));
    lazy::mark_step();
  }
  std::vector<double> values;
  for (const Tensor& l : losses) values.push_back(l.item<double>());
  check_same_run(finish(values, *gpt), eager);
  // The first step's graph differs (AdamW's moments are made in it); later steps reuse compiled graphs.
  CHECK(lazy::metrics::counter_value("UncachedCompile") <= 2);
  CHECK(lazy::metrics::counter_value("CachedCompile") >= kSteps - 2);
}

#ifdef VOLT_WITH_CUDA

TEST_CASE("cuda: gpt: the compiled GPT step on the GPU equals eager CPU over 5 AdamW steps") {
  SKIP_WITHOUT_GPU();
  auto data = make_batches();
  const Run eager = run_eager(data);
  Compiled c;
  check_same_run(run_compiled(data, Device::cuda(0), c), eager);
  CHECK(c.step->compiles() == 1);
}

// embedding's index check runs on the device inside a graph (as the class
// index check does), so the whole step is one graph launch.
TEST_CASE("cuda: gpt: the compiled GPT step replays as one graph launch per step") {
  SKIP_WITHOUT_GPU();
  auto data = make_batches();
  Compiled c;
  run_compiled(data, Device::cuda(0), c);
  CHECK(c.step->ran_as_graph());
  auto counters = cuda::simulated_counters();
  if (!counters) return;  // launches are counted by the simulated GPU (tests/cudasim)
  Tensor x = data[0].x.to(Device::cuda(0)), y = data[0].y.to(Device::cuda(0));
  cuda::synchronize(0);
  const auto before = *cuda::simulated_counters();
  constexpr int kMore = 3;
  for (int i = 0; i < kMore; ++i) (*c.step)(x, y);
  cuda::synchronize(0);
  const auto after = *cuda::simulated_counters();
  CHECK(after.graph_launches - before.graph_launches == kMore);
}

#endif
