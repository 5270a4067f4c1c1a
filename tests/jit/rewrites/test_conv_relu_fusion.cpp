// relu(convolution(...)) runs as one convolution with its relu flag in every
// traced mode (jit of a module, training and eval; compile_step; the lazy
// device), and its backward masks the gradient with the fused output's sign
// instead of running the convolution again (jit/rewrites/conv_relu.h).  References:
// eager mode's unfused steps, and finite differences in f64.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include <volt/autograd/gradcheck.h>
#include <volt/jit/check.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 3;

std::vector<Tensor> batch_x, batch_y;

void make_batches() {
  if (!batch_x.empty()) return;
  manual_seed(21);
  for (int i = 0; i < kSteps; ++i) {
    batch_x.push_back(Tensor::randn({kBatch, 1, 28, 28}));
    batch_y.push_back(Tensor::randint(0, 10, {kBatch}));
  }
}

std::shared_ptr<nn::MnistCNN> make_net() {
  manual_seed(17);
  return std::make_shared<nn::MnistCNN>();
}

// Eager steps (conv2d then relu, unfused under grad); the losses.
std::vector<double> eager_losses(nn::MnistCNN& net) {
  make_batches();
  nn::Adadelta opt(net.parameters(), {.lr = 1.0});
  std::vector<double> losses;
  manual_seed(5);
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    Tensor loss = nll_loss(net(batch_x[i]), batch_y[i]);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kFused = "relu=True)";
// A convolution forward prim, fused or not (its gradient prims are named apart).
const std::string kConv = "= prims.convolution(";

void check_all(const std::vector<jit::Trace>& traces) {
  for (const jit::Trace& t : traces) {
    INFO(t.provenance);
    CHECK(jit::trace_problem(t) == "");
  }
}

}  // namespace

TEST_CASE("conv+relu fusion: jit(module) trains the CNN as eager mode does, each conv fused with its ReLU") {
  auto eager_net = make_net(), jit_net = make_net();
  const std::vector<double> expected = eager_losses(*eager_net);
  nn::Adadelta opt(jit_net->parameters(), {.lr = 1.0});
  jit::JitFunction jm = jit::jit(jit_net);
  manual_seed(5);
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i);
    opt.zero_grad();
    Tensor loss = nll_loss(jm(batch_x[i]), batch_y[i]);
    loss.backward();
    opt.step();
    CHECK(std::fabs(loss.item<double>() - expected[i]) < 1e-5);
  }
  auto pe = eager_net->parameters(), pj = jit_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pj[i], pe[i]) < 1e-5);

  // The forward runs both convolutions fused; the backward has no forward
  // convolution (the mask is the saved output's sign) and reads a mask of it.
  const std::string fwd = jit::last_traces(jm).back().str();
  CHECK(count(fwd, kConv) == 2);
  CHECK(count(fwd, kFused) == 2);
  const std::string bwd = jit::last_backward_traces(jm).back().str();
  CHECK(count(bwd, kConv) == 0);
  CHECK(count(bwd, "prims.convolution_grad_input(") == 1);
  CHECK(count(bwd, "prims.convolution_grad_weight(") == 2);
  check_all(jit::last_traces(jm));
  check_all(jit::last_backward_traces(jm));

  // Eval (no dropout): the same fusion, the same values as eager eval.
  eager_net->eval();
  jit_net->eval();
  CHECK(max_abs_diff(jm(batch_x[0]), (*eager_net)(batch_x[0])) < 1e-5);
  const std::string eval = jit::last_traces(jm).back().str();
  CHECK(count(eval, kConv) == 2);
  CHECK(count(eval, kFused) == 2);
  CHECK(count(jit::last_backward_traces(jm).back().str(), kConv) == 0);
  check_all(jit::last_traces(jm));
}

TEST_CASE("conv+relu fusion: compile_step trains the CNN as eager mode does, each conv fused with its ReLU") {
  auto eager_net = make_net(), step_net = make_net();
  const std::vector<double> expected = eager_losses(*eager_net);
  nn::Adadelta opt(step_net->parameters(), {.lr = 1.0});
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = nll_loss((*step_net)(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.state = {*step_net, opt}});
  manual_seed(5);
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i);
    CHECK(std::fabs(step(batch_x[i], batch_y[i]).item<double>() - expected[i]) < 1e-5);
  }
  CHECK(step.compiles() == 1);
  auto pe = eager_net->parameters(), ps = step_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(ps[i], pe[i]) < 1e-5);
  const std::string text = step.last_traces().back().str();
  CHECK(count(text, kConv) == 2);
  CHECK(count(text, kFused) == 2);
  check_all(step.last_traces());
}

TEST_CASE("conv+relu fusion: the lazy device trains the CNN as eager mode does, each conv fused with its ReLU") {
  auto eager_net = make_net(), lazy_net = make_net();
  const std::vector<double> expected = eager_losses(*eager_net);
  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
  lazy_net->to(kLazy);
  nn::Adadelta opt(lazy_net->parameters(), {.lr = 1.0});
  manual_seed(5);
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i);
    opt.zero_grad();
    Tensor loss = nll_loss((*lazy_net)(batch_x[i].to(kLazy)), batch_y[i].to(kLazy));
    loss.backward();
    opt.step();
    lazy::mark_step();
    CHECK(std::fabs(loss.item<double>() - expected[i]) < 1e-5);
  }
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  auto pe = eager_net->parameters(), pl = lazy_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pl[i], pe[i]) < 1e-5);
  const std::vector<jit::Trace>& traces = lazy::last_compiled_traces();
  REQUIRE(!traces.empty());
  const std::string text = traces.back().str();
  CHECK(count(text, kConv) == 2);
  CHECK(count(text, kFused) == 2);
  check_all(traces);
}

TEST_CASE("conv+relu fusion: the relu-flagged convolution's gradient through the jit matches finite differences") {
  const Window2d win{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}};
  auto f = jit::jit([win](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{convolution(a[0], a[1], a[2], win, true)};
  });
  manual_seed(8);
  const std::vector<Tensor> inputs{Tensor::randn({2, 3, 6, 7}, DType::f64), Tensor::randn({4, 3, 3, 2}, DType::f64),
                                   Tensor::randn({4}, DType::f64)};
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& a) { return f(a)[0]; }, inputs);
  CHECK_MESSAGE(r.ok, r.message);
  // The backward masks with the output the forward saved: no convolution runs again.
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().requires_grad_());
  sum(f(leaves)[0]).backward();
  REQUIRE(!jit::last_backward_traces(f).empty());
  const std::string bwd = jit::last_backward_traces(f).back().str();
  CHECK(count(bwd, kConv) == 0);
  CHECK(count(bwd, "prims.le(") == 1);
  check_all(jit::last_backward_traces(f));
}

TEST_CASE("conv+relu fusion: a convolution whose output is read besides its ReLU stays unfused") {
  auto f = jit::jit([](const std::vector<Tensor>& a) {
    Tensor y = conv2d(a[0], a[1], a[2]);
    return std::vector<Tensor>{add(relu(y), y)};
  });
  manual_seed(9);
  const Tensor x = Tensor::randn({2, 2, 5, 5}), w = Tensor::randn({3, 2, 3, 3}), b = Tensor::randn({3});
  const Tensor expected = add(relu(conv2d(x, w, b)), conv2d(x, w, b));
  CHECK(max_abs_diff(f(std::vector<Tensor>{x, w, b})[0], expected) < 1e-5);
  const std::string text = jit::last_traces(f).back().str();
  CHECK(count(text, kConv) == 1);
  CHECK(count(text, kFused) == 0);
}
