// volt_bench --model cnn (see cnn_workload.h).  A training step is zero_grad,
// forward, nll_loss, backward and Adadelta's step, the tutorial's loop; the
// lazy step ends with mark_step() and waits for the step to finish, so every
// mode's time is the time until the updated parameters exist.
#include "cnn_workload.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "common.h"
#include "workload.h"
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace bench_cnn {
namespace {

using namespace volt;
using volt::benchmark::child_output_lines;
using volt::benchmark::json_field;

struct Cell {
  std::string mode;
  int64_t batch = 0;
  bench::Timing t;
  double samples_per_s() const { return t.median_us > 0 ? 1e6 / t.median_us * double(batch) : 0; }
};

struct Batch {
  Tensor x, y;  // x: (B, 1, 28, 28) f32, y: (B) i64
};

// bench::synthetic_batch's numbers (the ones libtorch_bench --model cnn uses), image-shaped.
std::vector<Batch> synthetic_batches(int64_t batch, Device device) {
  std::vector<Batch> out;
  for (int k = 0; k < bench::kBatchesHeld; ++k) {
    bench::RawBatch b = bench::synthetic_batch(batch, k);
    out.push_back({Tensor::from_vector<float>(b.x, {batch, 1, 28, 28}).to(device),
                   Tensor::from_vector<int64_t>(b.y, {batch}).to(device)});
  }
  return out;
}

Cell run_cell(const std::string& mode, int64_t batch, const Options& o) {
  manual_seed(1);
  auto net = std::make_shared<nn::MnistCNN>();
  net->train();
  Device device = kCPU;
  if (mode == "lazy") {
    lazy::set_backend(kCPU);
    device = kLazy;
    net->to(kLazy);
  }
  const std::vector<Batch> batches = synthetic_batches(batch, device);
  nn::Adadelta opt(net->parameters(), {.lr = 1.0});
  std::function<Tensor(const Tensor&)> model = [net](const Tensor& x) { return (*net)(x); };
  if (mode == "jit") {
    auto f = std::make_shared<jit::JitFunction>(jit::jit(net));
    model = [f](const Tensor& x) { return (*f)(x); };
  }
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = nll_loss(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  std::unique_ptr<jit::CompiledStep> compiled;
  if (mode == "step")
    compiled = std::make_unique<jit::CompiledStep>(
        jit::compile_step(body, {.state = {*net, opt}, .reuse_outputs = true}));
  size_t k = 0;
  auto train_step = [&] {
    const Batch& b = batches[k++ % batches.size()];
    if (compiled) {
      (void)(*compiled)(b.x, b.y);
    } else {
      Tensor loss = body(b.x, b.y);  // held over mark_step, so that the step's graph computes it
      if (mode == "lazy") {
        lazy::mark_step();
        lazy::wait_device_ops();
      }
    }
  };
  train_step();  // the first step compiles (jit, step, lazy)
  return {mode, batch, bench::time_steps(train_step, o.steps, o.warmup)};
}

// libtorch_bench --model cnn, as a child process (its own threads and allocator).
std::vector<Cell> run_libtorch(const Options& o) {
  std::string cmd = "'" + o.libtorch + "' --model cnn --no-eval --json --batch ";
  for (size_t i = 0; i < o.batches.size(); ++i) cmd += (i ? "," : "") + std::to_string(o.batches[i]);
  if (o.steps > 0) cmd += " --steps " + std::to_string(o.steps);
  if (o.threads > 0) cmd += " --threads " + std::to_string(o.threads);
  std::vector<Cell> cells;
  for (const std::string& line : child_output_lines(cmd)) {
    if (json_field(line, "phase") != "train") continue;
    Cell c{"libtorch", std::stoll(json_field(line, "batch")), {}};
    c.t.steps = std::stoll(json_field(line, "steps"));
    c.t.median_us = std::stod(json_field(line, "median_us"));
    c.t.min_us = std::stod(json_field(line, "min_us"));
    cells.push_back(c);
  }
  return cells;
}

}  // namespace

int run(const Options& o) {
  std::vector<Cell> cells;
  for (int64_t batch : o.batches)
    for (const std::string& mode : o.modes) {
      if (!o.json) std::fprintf(stderr, "volt_bench: cnn %s cpu batch %lld\n", mode.c_str(), (long long)batch);
      cells.push_back(run_cell(mode, batch, o));
    }
  if (!o.libtorch.empty()) {
    if (!o.json) std::fprintf(stderr, "volt_bench: running %s --model cnn\n", o.libtorch.c_str());
    for (const Cell& c : run_libtorch(o)) cells.push_back(c);
  }
  if (o.json) {
    for (const Cell& c : cells)
      std::printf(
          "{\"model\":\"cnn\",\"mode\":\"%s\",\"device\":\"cpu\",\"phase\":\"train\",\"batch\":%lld,"
          "\"steps\":%lld,\"median_us\":%.2f,\"min_us\":%.2f,\"samples_per_s\":%.1f}\n",
          c.mode.c_str(), (long long)c.batch, (long long)c.t.steps, c.t.median_us, c.t.min_us, c.samples_per_s());
    return 0;
  }
  std::printf("MNIST CNN (conv 32, conv 64, max_pool 2, fc 9216-128-10), nll_loss, Adadelta; cpu training step\n");
  std::printf("%-9s %6s %7s %12s %12s %12s %12s\n", "mode", "batch", "steps", "median us", "min us", "samples/s",
              "/libtorch");
  for (const Cell& c : cells) {
    const Cell* base = nullptr;
    for (const Cell& t : cells)
      if (t.mode == "libtorch" && t.batch == c.batch) base = &t;
    const double ratio = base ? c.samples_per_s() / base->samples_per_s() : std::nan("");
    std::printf("%-9s %6lld %7lld %12.1f %12.1f %12.0f %12.2f\n", c.mode.c_str(), (long long)c.batch,
                (long long)c.t.steps, c.t.median_us, c.t.min_us, c.samples_per_s(), ratio);
  }
  return 0;
}

}  // namespace bench_cnn
