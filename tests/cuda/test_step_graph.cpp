// The compiled training step on a GPU, replayed as a CUDA graph
// (jit/cuda/step_graph.h), against the same step compiled on the CPU.  Run on
// the simulated GPU of tests/cudasim by ./test.sh, which also counts what a
// replay asks of the device.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <memory>

#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

#include "cuda/skip_without_gpu.h"
#include "jit/step/eager_step.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

const Device kGPU = Device::cuda(0);

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(7);
  return std::make_shared<nn::MLP>(20, std::vector<int64_t>{32, 16, 5}, true, 0.25);
}

struct Run {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU
  bool graphed = false;
  size_t kernel_nodes = 0;
};

// `steps` compiled Adam steps on `device` from the same start, data and
// generator state.
Run run_compiled(Device device, int steps, bool graph) {
  auto net = make_net();
  net->to(device);
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return volt::testing::eager_step(*net, opt, x, y); },
                                {.state = {*net, opt}, .cuda_graph = graph});
  manual_seed(99);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(Tensor::randn({8, 20}).to(device));
    ys.push_back(Tensor::randint(0, 5, {8}).to(device));
  }
  manual_seed(1234);
  Run r;
  for (int i = 0; i < steps; ++i) {
    r.losses.push_back(step(xs[static_cast<size_t>(i % 4)], ys[static_cast<size_t>(i % 4)]).item_double());
    if (i == 10) opt.set_lr(3e-3);  // a run-time scalar: no recompile, no recapture
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().to(Device::cpu()));
  r.graphed = step.ran_as_graph();
  r.kernel_nodes = step.graph_kernel_nodes();
  CHECK(step.compiles() == 1);
  return r;
}

}  // namespace

TEST_CASE("cuda: 20 graph-replayed Adam steps with dropout equal the CPU compiled step") {
  SKIP_WITHOUT_GPU();
  Run cpu = run_compiled(Device::cpu(), 20, true);
  Run gpu = run_compiled(kGPU, 20, true);
  CHECK(gpu.graphed);
  CHECK(gpu.kernel_nodes > 0);
  CHECK(!cpu.graphed);
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(std::fabs(gpu.losses[i] - cpu.losses[i]) < 1e-4);
  }
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs_diff(gpu.params[i], cpu.params[i]) < 1e-4);
  }
  // And the same step on the GPU without a graph (launch by launch) agrees too.
  Run plain = run_compiled(kGPU, 20, false);
  CHECK(!plain.graphed);
  for (size_t i = 0; i < cpu.params.size(); ++i) CHECK(max_abs_diff(gpu.params[i], plain.params[i]) < 1e-5);
}

TEST_CASE("cuda: each replay of a captured step draws new dropout masks, those of the CPU step") {
  SKIP_WITHOUT_GPU();
  // Four calls: a plain run, then the capture's first replay, a replay, and
  // (with `draw_between`) a replay after an eager draw moved the generator on.
  auto masks = [](Device device, bool draw_between) {
    Tensor w = Tensor::ones({4, 64}, DType::f32, device);
    auto step = jit::compile_step([&](const Tensor& x) { return dropout(mul(x, w), 0.5, true); },
                                  {.state = {std::vector<Tensor>{w}}});
    Tensor x = Tensor::ones({4, 64}, DType::f32, device);
    manual_seed(5);
    std::vector<Tensor> r;
    for (int i = 0; i < 4; ++i) {
      if (i == 3 && draw_between) (void)Tensor::rand({3});
      r.push_back(step(x).to(Device::cpu()));
    }
    CHECK(step.ran_as_graph() == device.is_cuda());
    return r;
  };
  for (bool between : {false, true}) {
    INFO("an eager draw before the last call: " << between);
    std::vector<Tensor> cpu = masks(Device::cpu(), between), gpu = masks(kGPU, between);
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(max_abs_diff(gpu[i], cpu[i]) == 0);
    for (size_t i = 1; i < gpu.size(); ++i) CHECK(max_abs_diff(gpu[i - 1], gpu[i]) > 0);
  }
}

TEST_CASE("cuda: a replayed step is one graph launch, with no allocation and no host synchronisation") {
  SKIP_WITHOUT_GPU();
  auto counters = cuda::simulated_counters();
  if (!counters) {
    VOLT_SKIP("counts come from the simulated GPU (tests/cudasim)");
  }
  auto net = make_net();
  net->to(kGPU);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return volt::testing::eager_step(*net, opt, x, y); },
                                {.state = {*net, opt}, .reuse_outputs = true});
  Tensor x = Tensor::randn({8, 20}).to(kGPU), y = Tensor::randint(0, 5, {8}).to(kGPU);
  step(x, y);
  step(x, y);  // captured here
  cuda::synchronize(0);
  const auto before = *cuda::simulated_counters();
  const uint64_t storages = Storage::allocation_count();
  const auto mem = cuda::memory_stats(0);
  const int64_t launches = cuda::graph_launches();
  constexpr int kSteps = 10;
  for (int i = 0; i < kSteps; ++i) step(x, y);
  const auto after = *cuda::simulated_counters();
  CHECK(after.graph_launches - before.graph_launches == kSteps);
  CHECK(cuda::graph_launches() - launches == kSteps);
  CHECK(after.host_syncs - before.host_syncs == 0);
  CHECK(after.mallocs - before.mallocs == 0);
  CHECK(after.kernel_launches - before.kernel_launches == 0);  // every kernel is a node of the graph
  CHECK(after.copies - before.copies == 2 * kSteps);           // x and y into the graph's buffers
  CHECK(Storage::allocation_count() - storages == 0);
  CHECK(cuda::memory_stats(0).malloc_calls - mem.malloc_calls == 0);
  CHECK((after.graph_kernels - before.graph_kernels) == static_cast<long long>(kSteps * step.graph_kernel_nodes()));
  // Waiting for the results is the one synchronisation, after the loop.
  cuda::synchronize(0);
  CHECK(cuda::simulated_counters()->host_syncs - after.host_syncs == 1);
}

TEST_CASE("cuda: a class index out of range in a replayed step is reported at the next synchronisation") {
  SKIP_WITHOUT_GPU();
  auto net = make_net();
  net->to(kGPU);
  nn::SGD opt(net->parameters(), {.lr = 0.1});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return volt::testing::eager_step(*net, opt, x, y); },
                                {.state = {*net, opt}});
  Tensor x = Tensor::randn({8, 20}).to(kGPU), y = Tensor::randint(0, 5, {8}).to(kGPU);
  step(x, y);
  CHECK_NOTHROW(step(x, y).item_double());
  REQUIRE(step.ran_as_graph());
  Tensor bad = Tensor::full({8}, 7.0, DType::i64).to(kGPU);
  Tensor loss = step(x, bad);  // the host does not wait: the kernel notes it
  CHECK_THROWS_WITH_AS(loss.item_double(), doctest::Contains("target values must lie in [0, 5), got 7"), Error);
  CHECK_NOTHROW(step(x, y).item_double());  // reported once
}

TEST_CASE("cuda: an embedding row out of range in a replayed step is reported at the next synchronisation") {
  SKIP_WITHOUT_GPU();
  manual_seed(5);
  Tensor w = Tensor::randn({6, 4}).to(kGPU).requires_grad_();
  nn::SGD opt({w}, {.lr = 0.1});
  auto step = jit::compile_step(
      [&](const Tensor& index) {
        Tensor loss = sum(embedding(w, index) * embedding(w, index));
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      {.state = {std::vector<Tensor>{w}, opt}});
  Tensor good = Tensor::from_vector<int64_t>({0, 5, 2}).to(kGPU);
  step(good);
  CHECK_NOTHROW(step(good).item_double());
  REQUIRE(step.ran_as_graph());  // the index check runs on the device
  Tensor loss = step(Tensor::from_vector<int64_t>({1, 9, 2}).to(kGPU));
  CHECK_THROWS_WITH_AS(loss.item_double(), doctest::Contains("embedding: index out of range"), Error);
  CHECK_NOTHROW(step(good).item_double());
}

TEST_CASE("cuda: a capture refuses a host synchronisation with a clear error") {
  SKIP_WITHOUT_GPU();
  if (!cuda::simulated_counters()) {
    VOLT_SKIP("the simulated GPU's refusal is what is tested");
  }
  Tensor w = Tensor::ones({4}, DType::f32, kGPU);
  // item() reads the device from the host: fine eagerly, impossible inside a graph.
  cuda::Graph g;
  CHECK_THROWS_WITH_AS(g.capture(0, [&] { (void)sum(w).item_double(); }), doctest::Contains("capturing"), Error);
  CHECK(!g.captured());
  // The device is usable afterwards.
  CHECK(sum(w).item_double() == 4.0);
}
#endif  // VOLT_WITH_CUDA
