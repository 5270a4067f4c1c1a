// The lazy device's asynchronous mark_step: the step runs on a worker thread
// while the program records the next one; reads wait for it; errors inside it
// surface at the next read or wait_device_ops(), naming the op.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <sstream>

#include <sched.h>

#include <volt/jit/lazy/lazy.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

void fresh() {
  lazy::set_async(true);
  lazy::mark_step();
  lazy::wait_device_ops();
  lazy::clear_cache();
  lazy::metrics::reset();
}

// Restores the asynchronous-step mode a test found, whatever it set.
struct AsyncGuard {
  lazy::AsyncMode was = lazy::async_mode();
  ~AsyncGuard() { lazy::set_async_mode(was); }
};

struct Run {
  std::vector<double> losses;  // read every `read_every` steps (others read at the end)
  std::vector<Tensor> params;  // on the CPU
};

// 12 training steps of an MLP with dropout and Adam on the lazy device.
Run train(bool async, int read_every) {
  AsyncGuard restore;
  fresh();
  lazy::set_async(async);
  manual_seed(3);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 12; ++i) {
    xs.push_back(Tensor::rand({16, 24}));
    ys.push_back(Tensor::randint(0, 5, {16}));
  }
  manual_seed(11);
  auto net = std::make_shared<nn::MLP>(24, std::vector<int64_t>{32, 32, 5}, true, 0.2);
  net->to(kLazy);
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  nn::CrossEntropyLoss loss_fn;
  std::vector<Tensor> loss_tensors;
  manual_seed(5);
  Run r;
  for (int i = 0; i < 12; ++i) {
    opt.zero_grad();
    Tensor loss = loss_fn((*net)(xs[i].to(kLazy)), ys[i].to(kLazy));
    loss.backward();
    opt.step();
    lazy::mark_step();
    loss_tensors.push_back(loss);
    if ((i + 1) % read_every == 0)
      for (const Tensor& l : loss_tensors) r.losses.push_back(l.item<double>());
    if ((i + 1) % read_every == 0) loss_tensors.clear();
  }
  for (const Tensor& l : loss_tensors) r.losses.push_back(l.item<double>());
  for (const Tensor& p : net->parameters()) r.params.push_back(p.to(kCPU));
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("RunGraph.value_needed") == 0);
  CHECK(lazy::metrics::counter_value("Time.execute_us") > 0);
  return r;
}

}  // namespace

TEST_CASE("lazy async: a training loop's losses and parameters equal the synchronous run's") {
  const Run sync = train(false, 1);
  REQUIRE(sync.losses.size() == 12);
  for (int read_every : {1, 5, 100}) {
    CAPTURE(read_every);
    const Run async = train(true, read_every);
    REQUIRE(async.losses.size() == 12);
    for (size_t i = 0; i < 12; ++i) CHECK(async.losses[i] == sync.losses[i]);  // same kernels, same order
    for (size_t i = 0; i < sync.params.size(); ++i) CHECK(max_abs_diff(async.params[i], sync.params[i]) == 0.0);
  }
}

TEST_CASE("lazy async: reading a value waits for the step; the step keeps its inputs alive") {
  fresh();
  manual_seed(1);
  Tensor a = Tensor::randn({64, 96}), b = Tensor::randn({96, 48});
  const Tensor want = matmul(matmul(a, b), b.t()).sum({1});  // eager reference
  Tensor x = a.to(kLazy), w = b.to(kLazy);
  Tensor y = matmul(matmul(x, w), w.t()).sum({1});
  Tensor z = y * 2.0;
  lazy::mark_step();
  // The program lets go of the step's inputs while it may still run.
  x = Tensor();
  w = Tensor();
  CHECK(lazy::has_value(y));  // no longer a pending graph: handed over
  // to(kCPU), item() and printing read the step's results.
  CHECK(max_abs_diff(y.to(kCPU), want) < 1e-3);
  CHECK(z.sum().item<double>() == doctest::Approx(2.0 * want.sum().item<double>()).epsilon(1e-5));
  std::ostringstream os;
  os << z.narrow(0, 0, 1);
  std::ostringstream want_os;
  want_os << (want.narrow(0, 0, 1) * 2.0);
  CHECK(os.str().substr(0, 12) == want_os.str().substr(0, 12));
  // A later step reads this step's results as its inputs (no wait in between).
  Tensor u = y + 1.0;
  lazy::mark_step();
  lazy::wait_device_ops();
  CHECK(max_abs_diff(u.to(kCPU), want + 1.0) < 1e-3);
  CHECK(lazy::metrics::counter_value("RunGraph.mark_step") == 2);
}

TEST_CASE("lazy async: an error inside the step surfaces at the next wait, naming the op") {
  AsyncGuard restore;
  fresh();
  {
    Tensor a = Tensor::ones({1}).to(kLazy);
    Tensor small = a + 1.0;
    Tensor huge = a.expand({int64_t(1) << 24, int64_t(1) << 24}) * 2.0;  // 1 PiB of f32: more than any address space, overcommit or not
    lazy::mark_step();  // returns; the allocation fails on the worker
    CHECK_THROWS_WITH_AS(lazy::wait_device_ops(),
                         doctest::Contains("lazy: the step run after mark_step failed in mul -> cpu f32[16777216, 16777216]"),
                         Error);
    CHECK_NOTHROW(lazy::wait_device_ops());  // reported once
    // Every value of the failed step says why when read, and so does a graph built on it.
    CHECK_THROWS_WITH_AS(small.item<float>(), doctest::Contains("out of memory"), Error);
    CHECK_THROWS_WITH_AS((small * 3.0).item<float>(), doctest::Contains("failed in mul"), Error);
  }
  {
    // A read reports the error too (and wait_device_ops then has nothing left to report).
    Tensor a = Tensor::ones({1}).to(kLazy);
    Tensor huge = a.expand({int64_t(1) << 24, int64_t(1) << 24}) * 2.0;
    Tensor small = a + 1.0;
    lazy::mark_step();
    CHECK_THROWS_WITH_AS(small.item<float>(), doctest::Contains("failed in mul"), Error);
    CHECK_NOTHROW(lazy::wait_device_ops());
  }
  {
    // Synchronous steps: mark_step throws the kernel's own error, values stay pending.
    lazy::set_async(false);
    Tensor a = Tensor::ones({1}).to(kLazy);
    Tensor huge = a.expand({int64_t(1) << 24, int64_t(1) << 24}) * 2.0;
    CHECK_THROWS_WITH_AS(lazy::mark_step(), doctest::Contains("out of memory"), Error);
    CHECK_FALSE(lazy::has_value(huge));
  }
  lazy::set_async(true);
  // The device works on after a failed step.
  Tensor ok = Tensor::full({3}, 2.0).to(kLazy) * 4.0;
  lazy::mark_step();
  CHECK(ok.to(kCPU).to_vector<float>() == std::vector<float>{8, 8, 8});
}

TEST_CASE("lazy async: VOLT_LAZY_ASYNC's setting can be read and changed") {
  AsyncGuard restore;
  lazy::set_async(false);
  CHECK_FALSE(lazy::async());
  lazy::set_async(true);
  CHECK(lazy::async());
  CHECK(lazy::async_mode() == lazy::AsyncMode::On);
}

TEST_CASE("lazy async: the automatic mode runs steps on the worker only when a core is left over") {
  AsyncGuard restore;
  const int threads = cpu::num_threads();
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  lazy::set_async_mode(lazy::AsyncMode::Auto);
  // A step that fails tells where it ran: inside mark_step, mark_step throws;
  // on the worker, the read after it does.
  auto failing_step = [] {
    Tensor a = Tensor::ones({1}).to(kLazy);
    return a.expand({int64_t(1) << 24, int64_t(1) << 24}) * 2.0;
  };
  cpu::set_num_threads(cores);  // every core computes: the step runs inside mark_step
  CHECK_FALSE(lazy::async());
  {
    Tensor huge = failing_step();
    CHECK_THROWS_WITH_AS(lazy::mark_step(), doctest::Contains("out of memory"), Error);
  }
  lazy::clear_cache();
  if (cores > 1) {
    cpu::set_num_threads(cores - 1);  // a core is left for recording: the worker runs it
    CHECK(lazy::async());
    Tensor huge = failing_step();
    CHECK_NOTHROW(lazy::mark_step());
    CHECK_THROWS_WITH_AS(lazy::wait_device_ops(), doctest::Contains("out of memory"), Error);
  }
  cpu::set_num_threads(threads);
  lazy::wait_device_ops();
}
