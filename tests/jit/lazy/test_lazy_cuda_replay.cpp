// The lazy device on a CUDA backend replays a training step's graph from a
// captured CUDA graph (jit/lazy/replay.cpp): parameters and moments updated
// where they live, intermediates in the graph's memory, so a step allocates
// almost nothing.  Values are checked against eager mode on the CPU; the
// counts come from the simulated GPU (tests/cudasim) where it runs.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <volt/jit/lazy/lazy.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/device.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>
#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/graph.h>
#include "cuda/skip_without_gpu.h"
#endif
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

#ifdef VOLT_WITH_CUDA
namespace {

void fresh_cuda() {
  lazy::mark_step();
  lazy::wait_device_ops();
  lazy::clear_cache();
  lazy::metrics::reset();
  lazy::set_backend(Device::cuda(0));
}

struct MlpRun {
  std::vector<double> losses;
  std::vector<Tensor> params;             // on the CPU
  std::vector<uint64_t> allocations;      // per step: Storage::allocate calls
  std::vector<long long> host_syncs;      // per step, on the simulated GPU
};

// Adam steps of an MLP with dropout on fixed batches, eager on the CPU or
// lazy on CUDA; each lazy step ends with mark_step and wait_device_ops.
MlpRun train_mlp(bool lazy_mode, int steps) {
  std::vector<Tensor> xs, ys;
  manual_seed(3);
  for (int i = 0; i < steps; ++i) {
    xs.push_back(Tensor::rand({8, 24}));
    ys.push_back(Tensor::randint(0, 5, {8}));
  }
  std::vector<Tensor> xl, yl;
  for (int i = 0; lazy_mode && i < steps; ++i) xl.push_back(xs[i].to(kLazy)), yl.push_back(ys[i].to(kLazy));
  manual_seed(11);
  auto net = std::make_shared<nn::MLP>(24, std::vector<int64_t>{32, 32, 5}, true, 0.2);
  if (lazy_mode) net->to(kLazy);
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  MlpRun r;
  manual_seed(5);
  auto syncs = [] { return cuda::simulated_counters().value_or(cuda::SimCounters{}).host_syncs; };
  for (int i = 0; i < steps; ++i) {
    const uint64_t a0 = Storage::allocation_count();
    const long long s0 = syncs();
    opt.zero_grad();
    Tensor loss = loss_fn((*net)(lazy_mode ? xl[i] : xs[i]), lazy_mode ? yl[i] : ys[i]);
    loss.backward();
    opt.step();
    if (lazy_mode) {
      lazy::mark_step();
      lazy::wait_device_ops();
    }
    r.allocations.push_back(Storage::allocation_count() - a0);
    r.host_syncs.push_back(syncs() - s0);
    r.losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.to(kCPU));
  return r;
}

}  // namespace

TEST_CASE("lazy: the CUDA backend replays a training step's captured graph, allocating almost nothing") {
  SKIP_WITHOUT_GPU();
  const bool counted = cuda::simulated_counters().has_value();
  const int steps = 6;
  const MlpRun eager = train_mlp(false, steps);
  fresh_cuda();
  const MlpRun lazy_run = train_mlp(true, steps);
  lazy::set_backend(kCPU);
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(lazy_run.losses[i] - eager.losses[i]) < 1e-5);
    MESSAGE("step " << i << ": " << lazy_run.allocations[i] << " tensor allocations, " << lazy_run.host_syncs[i]
                    << " host synchronisations");
  }
  for (size_t i = 0; i < eager.params.size(); ++i) CHECK(max_abs_diff(lazy_run.params[i], eager.params[i]) < 1e-4);
  // The first step is interpreted, the second captured, the others replayed.
  CHECK(lazy::metrics::counter_value("Replay.captured") == 1);
  CHECK(lazy::metrics::counter_value("Replay.launched") == steps - 1);
  CHECK(lazy::metrics::counter_value("Replay.kept") == 0);
  for (int i = 2; i < steps; ++i) {
    CAPTURE(i);
    // What recording makes: cross_entropy's arange of the classes (on the
    // host, then on the device) and the loss's seed for backward.
    CHECK(lazy_run.allocations[i] == 3);
    if (counted) CHECK(lazy_run.host_syncs[i] <= 1);
  }
}

TEST_CASE("lazy: the CUDA backend keeps a value held across mark_step while the graph replays") {
  SKIP_WITHOUT_GPU();
  fresh_cuda();
  const Tensor w0 = Tensor::randn({6, 5}), g = Tensor::randn({6, 5});
  Tensor w = w0.to(kLazy), gl = g.to(kLazy);
  lazy::mark_step();
  Tensor wc = w0.clone();  // the same steps on the CPU
  std::vector<Tensor> held, want;
  const int steps = 6;
  for (int step = 0; step < steps; ++step) {
    held.push_back(w * 2.0 + 1.0);  // lives in the graph's memory, which the next replay overwrites
    want.push_back(wc * 2.0 + 1.0);
    w.mul_(0.5).add_(gl);  // written where w's old value was
    wc = wc * 0.5 + g;
    lazy::mark_step();
  }
  lazy::wait_device_ops();
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    CHECK(max_abs_diff(held[static_cast<size_t>(step)].to(kCPU), want[static_cast<size_t>(step)]) < 1e-6);
  }
  CHECK(max_abs_diff(w.to(kCPU), wc) < 1e-6);
  CHECK(lazy::metrics::counter_value("Replay.captured") == 1);
  CHECK(lazy::metrics::counter_value("Replay.launched") == steps - 1);
  // Before each replay but the first, the last replay's output was still held.
  CHECK(lazy::metrics::counter_value("Replay.kept") == steps - 2);

  // Let go, the outputs' memory serves the next replays again.
  held.clear();
  lazy::metrics::reset();
  for (int step = 0; step < 3; ++step) {
    Tensor out = w * 2.0 + 1.0;
    const Tensor expect = wc * 2.0 + 1.0;
    w.mul_(0.5).add_(gl);
    wc = wc * 0.5 + g;
    lazy::mark_step();
    CHECK(max_abs_diff(out.to(kCPU), expect) < 1e-6);
  }
  CHECK(lazy::metrics::counter_value("Replay.launched") == 3);
  CHECK(lazy::metrics::counter_value("Replay.kept") == 0);
  lazy::set_backend(kCPU);
}

TEST_CASE("lazy: the CUDA backend feeds a value back into its graph without moving it out") {
  SKIP_WITHOUT_GPU();
  fresh_cuda();
  const Tensor h0 = Tensor::randn({4, 7});
  Tensor h = h0.to(kLazy);
  Tensor hc = h0.clone();
  lazy::mark_step();
  const int steps = 6;
  uint64_t last = 0;
  for (int step = 0; step < steps; ++step) {
    const uint64_t a0 = Storage::allocation_count();
    h = h * 0.5 + 1.0;  // a new tensor each step, not written in place: the graph's memory
    lazy::mark_step();
    last = Storage::allocation_count() - a0;
    hc = hc * 0.5 + 1.0;
  }
  CHECK(max_abs_diff(h.to(kCPU), hc) < 1e-6);
  CHECK(lazy::metrics::counter_value("Replay.launched") == steps - 1);
  // The last step's h, read by the next run alone, is copied into the
  // graph's buffer before the graph writes the new h where it was.
  CHECK(lazy::metrics::counter_value("Replay.kept") == 0);
  CHECK(last == 0);
  lazy::set_backend(kCPU);
}

TEST_CASE("lazy: the CUDA backend does not write over an old value someone still holds") {
  SKIP_WITHOUT_GPU();
  fresh_cuda();
  const Tensor w0 = Tensor::randn({6, 5}), g = Tensor::randn({6, 5});
  Tensor w = w0.to(kLazy), gl = g.to(kLazy);
  lazy::mark_step();
  Tensor wc = w0.clone();
  const int steps = 8;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    // On even steps a second lazy tensor holds w's value from before the step
    // (copy_ shares the value): the step's new w must go elsewhere.
    Tensor held;
    if (step % 2 == 0) {
      held = Tensor::zeros({6, 5}).to(kLazy);
      held.copy_(w);
    }
    const Tensor before = wc.clone();
    w.mul_(0.5).add_(gl);
    wc = wc * 0.5 + g;
    lazy::mark_step();
    CHECK(max_abs_diff(w.to(kCPU), wc) < 1e-6);
    if (held.defined()) CHECK(max_abs_diff(held.to(kCPU), before) == 0);
  }
  // Each change of what is written in place is captured again, a few times;
  // then the graph is interpreted.
  CHECK(lazy::metrics::counter_value("Replay.captured") == 4);
  CHECK(lazy::metrics::counter_value("Replay.launched") >= 3);
  lazy::set_backend(kCPU);
}
#endif  // VOLT_WITH_CUDA
