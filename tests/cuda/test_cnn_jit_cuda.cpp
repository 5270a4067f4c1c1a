// The tutorial's CNN through volt::jit on the GPU (or the simulated one of
// tests/cudasim): jit(module) and compile_step train as CPU eager mode does.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA

#include <cmath>
#include <memory>

#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"
#include "tests/skip.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

const Device kGpu = Device::cuda(0);

std::shared_ptr<nn::MnistCNN> make_net() {
  manual_seed(11);
  auto net = std::make_shared<nn::MnistCNN>();
  net->eval();  // no dropout: the comparison is of the kernels
  return net;
}

}  // namespace

TEST_CASE("cuda: the tutorial's CNN through jit(module) and compile_step trains as CPU eager mode (3 steps)") {
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  auto cpu_net = make_net(), jit_net = make_net(), step_net = make_net();
  jit_net->to(kGpu);
  step_net->to(kGpu);
  nn::Adadelta cpu_opt(cpu_net->parameters()), jit_opt(jit_net->parameters()), step_opt(step_net->parameters());
  jit::JitFunction jm = jit::jit(jit_net);
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) {
        step_opt.zero_grad();
        Tensor loss = nll_loss((*step_net)(x), y);
        loss.backward();
        step_opt.step();
        return loss;
      },
      {.state = {*step_net, step_opt}});
  manual_seed(3);
  for (int i = 0; i < 3; ++i) {
    INFO("step " << i);
    Tensor x = Tensor::randn({2, 1, 28, 28});
    Tensor y = Tensor::randint(0, 10, {2});
    cpu_opt.zero_grad();
    Tensor lc = nll_loss((*cpu_net)(x), y);
    lc.backward();
    cpu_opt.step();
    jit_opt.zero_grad();
    Tensor lj = nll_loss(jm(x.to(kGpu)), y.to(kGpu));
    lj.backward();
    jit_opt.step();
    Tensor ls = step(x.to(kGpu), y.to(kGpu));
    CHECK(std::fabs(lj.item<double>() - lc.item<double>()) < 1e-5);
    CHECK(std::fabs(ls.item<double>() - lc.item<double>()) < 1e-5);
  }
  CHECK(step.compiles() == 1);
  auto pc = cpu_net->parameters(), pj = jit_net->parameters(), ps = step_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    CHECK(max_abs_diff(pj[i].to(kCPU), pc[i]) < 1e-5);
    CHECK(max_abs_diff(ps[i].to(kCPU), pc[i]) < 1e-5);
  }
}

#endif
