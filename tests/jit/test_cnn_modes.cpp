// The Lazy Tensor tutorial's CNN (nn::MnistCNN) trained with Adadelta in the
// three modes: eager, the lazy device and volt::jit, from the same seed on the
// same batches.  Dropout draws the same masks in every mode; what differs is
// rounding (eager Adadelta is one CPU loop, lazy the same rule as tensor ops).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

struct Batches {
  std::vector<Tensor> x, y;
};

Batches make_batches(int steps, int64_t batch) {
  Batches b;
  manual_seed(3);
  for (int i = 0; i < steps; ++i) {
    b.x.push_back(Tensor::randn({batch, 1, 28, 28}));
    b.y.push_back(Tensor::randint(0, 10, {batch}));
  }
  return b;
}

std::shared_ptr<nn::MnistCNN> make_net() {
  manual_seed(11);
  return std::make_shared<nn::MnistCNN>();
}

// Eager steps: zero_grad -> forward -> nll_loss -> backward -> step; the losses.
std::vector<double> eager_steps(nn::MnistCNN& net, nn::Optimizer& opt, const Batches& b, int steps) {
  std::vector<double> losses;
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss = nll_loss(net(b.x[i]), b.y[i]);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace

TEST_CASE("the tutorial's CNN prints as PyTorch's Net and has its parameter count") {
  auto net = make_net();
  CHECK(net->repr() ==
        "Net(\n"
        "  (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))\n"
        "  (conv2): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1))\n"
        "  (dropout1): Dropout(p=0.25, inplace=False)\n"
        "  (dropout2): Dropout(p=0.5, inplace=False)\n"
        "  (fc1): Linear(in_features=9216, out_features=128, bias=True)\n"
        "  (fc2): Linear(in_features=128, out_features=10, bias=True)\n"
        ")");
  CHECK(net->num_parameters() == 1199882);
  Tensor out = (*net)(Tensor::randn({2, 1, 28, 28}));
  CHECK(out.sizes() == Shape{2, 10});
  // log_softmax: each row's probabilities sum to 1.
  for (double s : sum(exp(out), {1}).to_vector<double>()) CHECK(s == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("lazy: 20 steps of the tutorial's CNN with Adadelta equal 20 eager steps; one compile") {
  const int steps = 20;
  const Batches b = make_batches(steps, 8);
  auto eager_net = make_net(), lazy_net = make_net();
  nn::Adadelta eager_opt(eager_net->parameters(), {.lr = 1.0});
  const std::vector<double> eager_losses = eager_steps(*eager_net, eager_opt, b, steps);

  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
  lazy_net->to(kLazy);
  nn::Adadelta lazy_opt(lazy_net->parameters(), {.lr = 1.0});
  std::vector<double> lazy_losses;
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    Tensor data = b.x[i].to(kLazy), target = b.y[i].to(kLazy);
    lazy_opt.zero_grad();
    Tensor loss = nll_loss((*lazy_net)(data), target);
    loss.backward();
    lazy_opt.step();
    lazy::mark_step();
    lazy_losses.push_back(loss.item<double>());  // computed by mark_step: no new graph
  }
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i);
    CHECK(std::fabs(lazy_losses[i] - eager_losses[i]) < 1e-5);
  }
  auto pe = eager_net->parameters(), pl = lazy_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pl[i], pe[i]) < 1e-5);
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("CachedCompile") == steps - 1);
  CHECK(lazy::metrics::counter_value("RunGraph.value_needed") == 0);
  CHECK(lazy::metrics::counter_value("Fallback.conv2d") == 0);

  // A new learning rate (StepLR at an epoch's end) is a run-time scalar: no recompile.
  nn::StepLR scheduler(lazy_opt, 1, 0.7);
  scheduler.step();
  CHECK(lazy_opt.lr() == 0.7);
  lazy_opt.zero_grad();
  Tensor loss = nll_loss((*lazy_net)(b.x[0].to(kLazy)), b.y[0].to(kLazy));  // held, as in the loop
  loss.backward();
  lazy_opt.step();
  lazy::mark_step();
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("CachedCompile") == steps);
  // The compiled step holds the convolution prims, not a fallback.
  REQUIRE(!lazy::last_compiled_traces().empty());
  const std::string trace = lazy::last_compiled_traces().front().str();
  CHECK(trace.find("= prims.convolution(") != std::string::npos);
  CHECK(trace.find("= prims.convolution_grad_input(") != std::string::npos);
  CHECK(trace.find("= prims.convolution_grad_weight(") != std::string::npos);
  CHECK(trace.find("max_pool2d_backward") != std::string::npos);
  lazy::mark_step();
}

TEST_CASE("jit: the tutorial's CNN through jit(module) trains as in eager mode") {
  const int steps = 4;
  const Batches b = make_batches(steps, 4);
  auto eager_net = make_net(), jit_net = make_net();
  nn::Adadelta eager_opt(eager_net->parameters(), {.lr = 1.0});
  nn::Adadelta jit_opt(jit_net->parameters(), {.lr = 1.0});
  const std::vector<double> eager_losses = eager_steps(*eager_net, eager_opt, b, steps);
  jit::JitFunction jm = jit::jit(jit_net);
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i);
    jit_opt.zero_grad();
    Tensor loss = nll_loss(jm(b.x[i]), b.y[i]);
    loss.backward();
    jit_opt.step();
    CHECK(std::fabs(loss.item<double>() - eager_losses[i]) < 1e-5);
  }
  auto pe = eager_net->parameters(), pj = jit_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pj[i], pe[i]) < 1e-5);
  // Eval mode (no dropout) agrees too, and the trace shows conv2d's decomposition.
  eager_net->eval();
  jit_net->eval();
  CHECK(max_abs_diff(jm(b.x[0]), (*eager_net)(b.x[0])) < 1e-5);
  const std::string trace = jit::last_traces(jm).front().str();
  CHECK(trace.find("conv2d") != std::string::npos);
  CHECK(trace.find("max_pool2d") != std::string::npos);
}

TEST_CASE("compile_step: the tutorial's CNN with Adadelta trains as in eager mode; a new lr does not recompile") {
  const int steps = 4;
  const Batches b = make_batches(steps, 4);
  auto eager_net = make_net(), step_net = make_net();
  nn::Adadelta eager_opt(eager_net->parameters(), {.lr = 1.0});
  nn::Adadelta step_opt(step_net->parameters(), {.lr = 1.0});
  std::vector<double> eager_losses = eager_steps(*eager_net, eager_opt, b, steps);
  eager_opt.set_lr(0.5);
  eager_losses.push_back(eager_steps(*eager_net, eager_opt, b, 1).at(0));  // seed 5 again: as below
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) {
        step_opt.zero_grad();
        Tensor loss = nll_loss((*step_net)(x), y);
        loss.backward();
        step_opt.step();
        return loss;
      },
      {.state = {*step_net, step_opt}});
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i);
    CHECK(std::fabs(step(b.x[i], b.y[i]).item<double>() - eager_losses[i]) < 1e-5);
  }
  step_opt.set_lr(0.5);
  manual_seed(5);
  CHECK(std::fabs(step(b.x[0], b.y[0]).item<double>() - eager_losses[steps]) < 1e-5);
  CHECK(step.compiles() == 1);
  auto pe = eager_net->parameters(), ps = step_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(ps[i], pe[i]) < 1e-5);
  for (size_t i = 0; i < pe.size(); ++i) {
    CHECK(max_abs_diff(step_opt.square_avg(i), eager_opt.square_avg(i)) < 1e-5);
    CHECK(max_abs_diff(step_opt.acc_delta(i), eager_opt.acc_delta(i)) < 1e-5);
  }
}

TEST_CASE("jit: a traced conv2d and max_pool2d print their window settings") {
  auto f = jit::jit([](const std::vector<Tensor>& a) {
    Tensor y = conv2d(a[0], a[1], Tensor(), {.stride = {2, 1}, .padding = {1, 0}});
    return std::vector<Tensor>{max_pool2d(y, {2, 2})};
  });
  manual_seed(0);
  f(std::vector<Tensor>{Tensor::randn({1, 2, 9, 8}), Tensor::randn({4, 2, 3, 3})});
  const std::string text = jit::last_traces(f).back().str();
  CHECK(text.find("kernel_size=(3, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 1)") != std::string::npos);
  CHECK(text.find("kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1)") != std::string::npos);
}
