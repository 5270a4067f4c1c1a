// The lazy device's memory plans: a mark_step graph writes new values into the
// buffers of the old values they replace when nothing else can read those, and
// keeps its intermediates in an arena.  Checked against eager mode and against
// the same lazy program run without plans.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <volt/jit/lazy/lazy.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

void fresh() {
  lazy::mark_step();
  lazy::wait_device_ops();
  lazy::clear_cache();
  lazy::metrics::reset();
}

// Restores the lazy device's settings a test changes.
struct Settings {
  bool plan = lazy::memory_plan();
  lazy::AsyncMode mode = lazy::async_mode();
  ~Settings() {
    lazy::wait_device_ops();
    lazy::set_memory_plan(plan);
    lazy::set_async_mode(mode);
  }
};

struct MlpRun {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU
  uint64_t allocations_last_step = 0;
};

// 20 Adam steps of an MLP (dropout 0.2) on fixed batches; lazy or eager.
MlpRun train_mlp(bool lazy_mode) {
  const int steps = 20;
  std::vector<Tensor> xs, ys;
  manual_seed(3);
  for (int i = 0; i < steps; ++i) {
    xs.push_back(Tensor::rand({8, 24}));
    ys.push_back(Tensor::randint(0, 5, {8}));
  }
  manual_seed(11);
  auto net = std::make_shared<nn::MLP>(24, std::vector<int64_t>{32, 32, 5}, true, 0.2);
  if (lazy_mode) net->to(kLazy);
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  MlpRun r;
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    const uint64_t a0 = Storage::allocation_count();
    opt.zero_grad();
    Tensor x = lazy_mode ? xs[i].to(kLazy) : xs[i], y = lazy_mode ? ys[i].to(kLazy) : ys[i];
    Tensor loss = loss_fn((*net)(x), y);
    loss.backward();
    opt.step();
    if (lazy_mode) {
      lazy::mark_step();
      lazy::wait_device_ops();
    }
    r.allocations_last_step = Storage::allocation_count() - a0;
    r.losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.to(kCPU));
  return r;
}

}  // namespace

TEST_CASE("lazy plans: an MLP's 20 steps match eager mode and the run without plans, with fewer allocations") {
  Settings keep;
  lazy::set_async_mode(lazy::AsyncMode::Off);
  const MlpRun eager = train_mlp(false);
  for (bool async : {false, true}) {
    CAPTURE(async);
    lazy::set_async(async);
    fresh();
    lazy::set_memory_plan(false);
    const MlpRun plain = train_mlp(true);
    fresh();
    lazy::set_memory_plan(true);
    const MlpRun planned = train_mlp(true);
    const int64_t donated = lazy::metrics::counter_value("Plan.donated");
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      CHECK(std::fabs(planned.losses[i] - eager.losses[i]) < 1e-5);
      CHECK(planned.losses[i] == plain.losses[i]);  // the same kernels on the same values
    }
    for (size_t i = 0; i < eager.params.size(); ++i) {
      CHECK(max_abs_diff(planned.params[i], eager.params[i]) < 1e-4);
      CHECK(max_abs_diff(planned.params[i], plain.params[i]) == 0);
    }
    // 6 parameters, each with Adam's two moments: up to 18 new values written
    // into the old ones' buffers, and the intermediates from the arena.
    MESSAGE("allocations in a step: " << plain.allocations_last_step << " without plans, "
                                      << planned.allocations_last_step << " with");
    CHECK(donated >= 12 * 20);  // at least every moment, every step
    CHECK(planned.allocations_last_step + 18 <= plain.allocations_last_step);
  }
}

TEST_CASE("lazy plans: the MNIST CNN's 20 Adadelta steps match eager mode") {
  Settings keep;
  lazy::set_async_mode(lazy::AsyncMode::Off);
  lazy::set_memory_plan(true);
  const int steps = 20;
  std::vector<Tensor> xs, ys;
  manual_seed(4);
  for (int i = 0; i < steps; ++i) {
    xs.push_back(Tensor::rand({2, 1, 28, 28}));
    ys.push_back(Tensor::randint(0, 10, {2}));
  }
  std::vector<double> losses[2];
  std::vector<Tensor> params[2];
  for (int lazy_mode = 0; lazy_mode < 2; ++lazy_mode) {
    fresh();
    manual_seed(12);
    auto net = std::make_shared<nn::MnistCNN>();
    if (lazy_mode) net->to(kLazy);
    nn::Adadelta opt(net->parameters(), {.lr = 1.0});
    manual_seed(6);
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      Tensor x = lazy_mode ? xs[i].to(kLazy) : xs[i], y = lazy_mode ? ys[i].to(kLazy) : ys[i];
      Tensor loss = nll_loss((*net)(x), y);
      loss.backward();
      opt.step();
      if (lazy_mode) lazy::mark_step();
      losses[lazy_mode].push_back(loss.item<double>());
    }
    for (const Tensor& p : net->parameters()) params[lazy_mode].push_back(p.to(kCPU));
  }
  for (int i = 0; i < steps; ++i) CHECK(std::fabs(losses[1][i] - losses[0][i]) < 1e-5);
  for (size_t i = 0; i < params[0].size(); ++i) CHECK(max_abs_diff(params[1][i], params[0][i]) < 1e-5);
}

TEST_CASE("lazy plans: an old value someone still reads keeps its data") {
  Settings keep;
  lazy::set_memory_plan(true);
  for (bool async : {false, true}) {
    CAPTURE(async);
    lazy::set_async(async);
    fresh();
    const Tensor w0 = Tensor::randn({6, 5});
    const Tensor g = Tensor::randn({6, 5});
    Tensor w = w0.to(kLazy);
    Tensor gl = g.to(kLazy);
    lazy::mark_step();
    for (int step = 0; step < 3; ++step) {  // the first compiles, the others run cached plans
      const Tensor before = w.to(kCPU);
      // A second lazy tensor holding w's current value (copy_ shares the value,
      // as a copy would hold the data), and a value computed from it.
      Tensor held = Tensor::zeros({6, 5}).to(kLazy);
      held.copy_(w);
      Tensor twice = w * 2.0;
      w.mul_(0.5).add_(gl);  // one fused kernel reading w at the same element
      lazy::mark_step();
      CHECK(max_abs_diff(held.to(kCPU), before) == 0);
      CHECK(max_abs_diff(twice.to(kCPU), before * 2.0) == 0);
      CHECK(max_abs_diff(w.to(kCPU), before * 0.5 + g) < 1e-6);
      lazy::wait_device_ops();
      CHECK(lazy::metrics::counter_value("Plan.donated") == 0);
    }
    // Unheld, the old value's buffer takes the new one.
    lazy::metrics::reset();
    const Tensor unheld = w.to(kCPU);
    w.mul_(0.5).add_(gl);
    lazy::mark_step();
    lazy::wait_device_ops();
    CHECK(lazy::metrics::counter_value("Plan.donated") == 1);
    CHECK(max_abs_diff(w.to(kCPU), unheld * 0.5 + g) < 1e-6);
    // Nothing holds the old value but a pending node outside the graph run:
    // syncing w alone must leave that node its input.
    const Tensor before = w.to(kCPU);
    Tensor later = w + 1.0;
    w.mul_(0.5).add_(gl);
    lazy::sync({w});
    CHECK(max_abs_diff(w.to(kCPU), before * 0.5 + g) < 1e-6);
    CHECK(max_abs_diff(later.to(kCPU), before + 1.0) == 0);
  }
}
