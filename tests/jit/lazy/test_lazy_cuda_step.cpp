// The lazy device with a CUDA backend over a training step: what the host
// waits for.  The counts come from the simulated GPU (tests/cudasim); on a
// real GPU or without one the cases say so and check only what they can.
#include <doctest/doctest.h>

#include <volt/jit/lazy/lazy.h>
#include <volt/nn/optim.h>
#include <volt/tensor/device.h>
#include <volt/tensor/ops.h>
#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/graph.h>
#include "cuda/skip_without_gpu.h"
#endif
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

#ifdef VOLT_WITH_CUDA
namespace {

// One Adam step of a linear classifier; returns the loss.
Tensor train_step(const Tensor& x, const Tensor& target, nn::Adam& opt) {
  opt.zero_grad();
  Tensor loss = cross_entropy(volt::relu(volt::linear(x, opt.params()[0])), target);
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace

TEST_CASE("lazy: the CUDA backend checks a step's targets on the device, the host waits once a step") {
  SKIP_WITHOUT_GPU();
  // Counted on the simulated GPU only; on a real one the values and the error are checked.
  auto counters = [] { return cuda::simulated_counters().value_or(cuda::SimCounters{}); };
  const bool counted = cuda::simulated_counters().has_value();
  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
  lazy::set_backend(Device::cuda(0));
  Tensor x = Tensor::randn({8, 6}), w0 = Tensor::randn({5, 6});
  Tensor y = Tensor::from_vector<int64_t>({0, 4, 2, 1, 3, 3, 0, 4});
  nn::Adam eager(std::vector<Tensor>{w0.clone().requires_grad_()}, {.lr = 0.05});
  nn::Adam lazy_opt(std::vector<Tensor>{w0.to(kLazy).requires_grad_()}, {.lr = 0.05});
  Tensor xl = x.to(kLazy), yl = y.to(kLazy);
  for (int i = 0; i < 3; ++i) {  // the first step compiles; the later ones are the steady state
    lazy::wait_device_ops();
    const cuda::SimCounters before = counters();
    Tensor got = train_step(xl, yl, lazy_opt);
    lazy::mark_step();
    const cuda::SimCounters recorded = counters();
    lazy::wait_device_ops();
    const cuda::SimCounters after = counters();
    Tensor want = train_step(x, y, eager);
    CAPTURE(i);
    if (counted && i > 0) {
      CHECK(recorded.host_syncs - before.host_syncs == 0);  // the target check did not read y on the host
      CHECK(after.host_syncs - recorded.host_syncs == 1);   // wait_device_ops is the step's one wait
      // Host to device: the graph's runtime scalars (Adam's lr, bias corrections...)
      // in one block, and one made while recording (a factory run on the backend).
      // Device to device: the replayed graph's (jit/lazy/replay.cpp) five leaves
      // not written in place (x, y, y as the target check returns it, the
      // classes' arange, the loss's seed), copied into the graph's buffers.
      CHECK(recorded.copies - before.copies == 2 + 5);
    }
    CHECK(max_abs_diff(got, want) < 1e-5);
    CHECK(max_abs_diff(lazy_opt.params()[0], eager.params()[0]) < 1e-5);
  }
  CHECK(lazy::metrics::counter_value("DataOp.check_target_range") == 3);
  CHECK(lazy::metrics::counter_value("Fallback.check_target_range") == 0);

  // A bad target is found by the kernel and reported at the wait, with nll_loss's message.
  Tensor bad = Tensor::from_vector<int64_t>({0, 4, 9, 1, 3, 3, 0, 4}).to(kLazy);
  Tensor loss = cross_entropy(volt::linear(xl, w0.to(kLazy)), bad);
  lazy::mark_step();
  CHECK_THROWS_WITH_AS(lazy::wait_device_ops(), doctest::Contains("target values must lie in [0, 5), got 9"), Error);
  lazy::set_backend(kCPU);
}
#endif  // VOLT_WITH_CUDA
