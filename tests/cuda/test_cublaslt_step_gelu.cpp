// The pass "cuBLASLt activation epilogue" (jit/cuda/lt_activation.cpp) on a
// recorded tanh GELU: compile_step under autocast records gelu as its
// decomposition's prims (on the linear's output cast to f32, cast back
// after) and a backward that reads the inner values; the pass makes the
// chain one GELU_AUX_BIAS line and the inner values again from its AUX
// output in the backward.  Three SGD steps against the CPU's compile_step
// under autocast; the exact gelu stays as it was.  The lazy device's CUDA
// backend under autocast: its f32 GELU's scalars are run-time inputs, so the
// pass leaves it; it trains as eager mode on the CPU.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/lazy/lazy.h>
#include <volt/nn/activation.h>
#include <volt/nn/linear.h>
#include <volt/nn/sequential.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/factories.h>

#include "cuda/cublaslt_tests.h"

using namespace volt;
using volt::testing::count_of;
using volt::testing::max_abs_diff;

namespace {

const Device kGPU = Device::cuda(0);

// The rounding of the 16-bit type, 2^-8 (bf16) or 2^-11 (f16) of a value.
double unit(DType t) { return t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

double scale(const Tensor& v) { return max_abs_diff(v, zeros_like(v)); }

// 33 -> 40 -> GELU -> 24 -> GELU -> 10, the GELUs with `approximate`.
std::shared_ptr<nn::Sequential> gelu_mlp(const char* approximate) {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(nn::Linear(33, 40), nn::GELU(approximate), nn::Linear(40, 24),
                                          nn::GELU(approximate), nn::Linear(24, 10));
}

struct GeluSteps {
  std::vector<double> losses;
  std::vector<Tensor> updates;  // each parameter's change over the steps, on the CPU
  std::string trace;
  size_t nodes = 0;
};

// Three compiled SGD steps of sum(mlp(x) * r) under autocast to t on `device`.
GeluSteps step_gelu_mlp(Device device, DType t, const char* approximate, bool pass = true) {
  auto net = gelu_mlp(approximate);
  net->to(device);
  std::vector<Tensor> before;
  for (const Tensor& p : net->parameters()) before.push_back(p.detach().to(Device::cpu()).clone());
  nn::SGD opt(net->parameters(), {.lr = 0.1});
  manual_seed(6);
  Tensor x = Tensor::randn({8, 33}).to(device), r = Tensor::randn({8, 10}).to(device);
  jit::StepOptions options{.state = {*net, opt}, .autocast = t};
  if (!pass) options.jit.pipeline.without = {"cuBLASLt activation epilogue"};
  auto step = jit::compile_step(
      [&](const Tensor& in, const Tensor& target) {
        Tensor loss = sum(mul(net->forward(in).to(DType::f32), target));
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      std::move(options));
  GeluSteps s;
  for (int i = 0; i < 3; ++i) s.losses.push_back(step(x, r).item_double());
  const std::vector<Tensor> params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) s.updates.push_back(sub(params[i].detach().to(Device::cpu()), before[i]));
  s.trace = step.last_trace_str();
  s.nodes = step.graph_kernel_nodes();
  return s;
}

}  // namespace

// The fused GELU is within one unit of the unfused one (one rounding fewer,
// test_cublaslt_autocast_gelu.cpp); the backward reads the AUX output, the
// pre-activation as the unfused GEMM rounds it, and makes the inner values
// from it as the unfused program does.  The module jit's bound for a step's
// gradients, two units of each tensor's scale, holds for the parameters'
// changes over three steps (each the learning rate times a gradient).
TEST_CASE("cuda: compile_step under autocast takes the recorded tanh GELU into GELU_AUX_BIAS and trains as the CPU") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(std::string(dtype_name(t)));
    const GeluSteps cpu = step_gelu_mlp(Device::cpu(), t, "tanh");
    const GeluSteps gpu = step_gelu_mlp(kGPU, t, "tanh");
    const GeluSteps plain = step_gelu_mlp(kGPU, t, "tanh", false);
    INFO(gpu.trace);
    CHECK(count_of(gpu.trace, "= cublas_linear_gelu_aux(") == 2);
    CHECK(count_of(gpu.trace, "= cublas_linear(") == 1);
    CHECK(count_of(plain.trace, "= cublas_linear(") == 3);
    CHECK(count_of(cpu.trace, "cublas_linear") == 0);
    // The inner values (tanh's output among them) are made in the backward only.
    const size_t loss_at = gpu.trace.find("# ---- loss ----");
    REQUIRE(loss_at != std::string::npos);
    CHECK(count_of(gpu.trace.substr(0, loss_at), "prims.tanh(") == 0);
    CHECK(count_of(gpu.trace.substr(loss_at), "prims.tanh(") == 2);
    CHECK(count_of(plain.trace.substr(0, plain.trace.find("# ---- loss ----")), "prims.tanh(") == 2);
    double worst_loss = 0, worst = 0;
    for (size_t i = 0; i < cpu.losses.size(); ++i) {
      CAPTURE(i);
      // A sum of 80 products of outputs (scale about 1) and targets.
      const double d = std::fabs(gpu.losses[i] - cpu.losses[i]);
      CHECK(d <= 2 * unit(t) * 80);
      worst_loss = std::max(worst_loss, d);
    }
    REQUIRE(gpu.updates.size() == cpu.updates.size());
    for (size_t i = 0; i < cpu.updates.size(); ++i) {
      CAPTURE(i);
      const double s = scale(cpu.updates[i]);
      CHECK(max_abs_diff(gpu.updates[i], cpu.updates[i]) <= 2 * unit(t) * s);
      CHECK(max_abs_diff(plain.updates[i], cpu.updates[i]) <= 2 * unit(t) * s);
      worst = std::max(worst, max_abs_diff(gpu.updates[i], cpu.updates[i]) / (unit(t) * s));
    }
    MESSAGE(std::string(dtype_name(t)) << ": losses up to " << worst_loss << " from the CPU's, parameter changes up to "
                                       << worst << " units of their scale; graph nodes " << gpu.nodes << " ("
                                       << plain.nodes << " without the pass)");
    // The two GELUs' forward kernels gone; the backward's regions as many as before.
    if (cuda::simulated_counters()) CHECK(plain.nodes - gpu.nodes == 2);
  }
}

TEST_CASE("cuda: compile_step under autocast leaves the exact (erf) GELU to its linear and kernel") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  const DType t = DType::bf16;
  const GeluSteps cpu = step_gelu_mlp(Device::cpu(), t, "none");
  const GeluSteps gpu = step_gelu_mlp(kGPU, t, "none");
  INFO(gpu.trace);
  CHECK(count_of(gpu.trace, "cublas_linear_gelu") == 0);
  CHECK(count_of(gpu.trace, "= cublas_linear(") == 3);
  for (size_t i = 0; i < cpu.updates.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(gpu.updates[i], cpu.updates[i]) <= 2 * unit(t) * scale(cpu.updates[i]));
  }
}

namespace {

struct LazyRun {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU
  std::string trace;
};

// Three SGD steps of sum(mlp(x) * r), the forward under autocast to bf16:
// eager on the CPU, or on the lazy device with a CUDA backend.
LazyRun train_lazy(bool lazy_mode) {
  auto net = gelu_mlp("tanh");
  const Device d = lazy_mode ? kLazy : Device::cpu();
  net->to(d);
  nn::SGD opt(net->parameters(), {.lr = 0.1});
  manual_seed(6);
  Tensor x = Tensor::randn({8, 33}).to(d), r = Tensor::randn({8, 10}).to(d);
  LazyRun run;
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard low(DType::bf16);
      loss = sum(mul(net->forward(x).to(DType::f32), r));
    }
    loss.backward();
    opt.step();
    if (lazy_mode) lazy::mark_step();
    run.losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : net->parameters()) run.params.push_back(p.to(Device::cpu()));
  if (lazy_mode) run.trace = lazy::last_compiled_traces().back().str();
  return run;
}

}  // namespace

// The lazy device records gelu as compile_step does, but an f32 op's scalars
// (0.044715, sqrt(2/pi), 0.5, 1) enter its graph as run-time inputs
// (jit/lazy/record.cpp), values the pass cannot read: the chain could be
// any formula of that shape, so the pass leaves it, and the layer runs as a
// cuBLAS linear and fused kernels.
TEST_CASE("lazy: the CUDA backend under autocast trains a tanh-GELU MLP as eager CPU, its f32 GELU unfused") {
  SKIP_WITHOUT_GPU();
  const LazyRun eager = train_lazy(false);
  lazy::mark_step();
  lazy::clear_cache();
  lazy::set_backend(kGPU);
  const LazyRun lz = train_lazy(true);
  // The compiled graphs and the device memory their replays hold go: the
  // cache's, and the last one's (held for last_compiled_traces) when a CPU
  // graph takes its place.
  lazy::wait_device_ops();
  lazy::clear_cache();
  lazy::set_backend(Device::cpu());
  (void)add(Tensor::ones({1}).to(kLazy), 1.0).to(Device::cpu());
  INFO(lz.trace);
  CHECK(count_of(lz.trace, "cublas_linear_gelu") == 0);
  CHECK(count_of(lz.trace, "= cublas_linear(") == 3);
  CHECK(count_of(lz.trace, "prims.tanh(") == 2);
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(lz.losses[i] - eager.losses[i]) <= 2 * unit(DType::bf16) * 80);
  }
  REQUIRE(lz.params.size() == eager.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(lz.params[i], eager.params[i]) <= 2 * unit(DType::bf16) * scale(eager.params[i]));
  }
}
#endif  // VOLT_WITH_CUDA
