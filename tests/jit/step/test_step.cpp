// The compiled training step (jit/step/step.h) against the eager loop it is written as.
#include <doctest/doctest.h>

#include "tests/jit/step/eager_step.h"

#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <unordered_set>

#include <volt/jit/check.h>
#include <volt/jit/step/memory_plan.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

std::shared_ptr<nn::MLP> make_net(double dropout) {
  manual_seed(7);
  return std::make_shared<nn::MLP>(20, std::vector<int64_t>{32, 16, 5}, true, dropout);
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches(int n, int64_t batch) {
  manual_seed(99);
  std::vector<Batch> r;
  for (int i = 0; i < n; ++i) r.push_back({Tensor::randn({batch, 20}), Tensor::randint(0, 5, {batch})});
  return r;
}

using volt::testing::eager_step;

// Runs `steps` eager and compiled steps from the same start and random state;
// `between(i, opt_eager, opt_compiled)` runs before step i.  Returns the largest
// loss and parameter differences.
template <class Opt, class Options>
std::pair<double, double> compare(Options options, int steps, const std::vector<Batch>& data,
                                  const std::function<void(int, Opt&, Opt&)>& between, jit::CompiledStep** out = nullptr,
                                  std::unique_ptr<jit::CompiledStep>* keep = nullptr) {
  auto eager_net = make_net(0.2), compiled_net = make_net(0.2);
  Opt eager_opt(eager_net->parameters(), options), compiled_opt(compiled_net->parameters(), options);
  std::vector<double> eager_losses;
  manual_seed(1234);
  for (int i = 0; i < steps; ++i) {
    between(i, eager_opt, compiled_opt);
    const Batch& b = data[static_cast<size_t>(i) % data.size()];
    eager_losses.push_back(eager_step(*eager_net, eager_opt, b.x, b.y).item_double());
  }
  auto step = std::make_unique<jit::CompiledStep>(jit::compile_step(
      [&](const Tensor& x, const Tensor& y) { return eager_step(*compiled_net, compiled_opt, x, y); },
      {.state = {*compiled_net, compiled_opt}}));
  manual_seed(1234);
  double loss_diff = 0;
  for (int i = 0; i < steps; ++i) {
    between(i, eager_opt, compiled_opt);
    const Batch& b = data[static_cast<size_t>(i) % data.size()];
    loss_diff = std::max(loss_diff, std::fabs((*step)(b.x, b.y).item_double() - eager_losses[static_cast<size_t>(i)]));
  }
  double param_diff = 0;
  auto pe = eager_net->parameters(), pc = compiled_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) param_diff = std::max(param_diff, max_abs_diff(pc[i], pe[i]));
  if (out) *out = step.get();
  if (keep) *keep = std::move(step);
  return {loss_diff, param_diff};
}

}  // namespace

TEST_CASE("compile_step: 50 Adam steps with dropout equal 50 eager steps") {
  auto data = make_batches(5, 8);
  std::unique_ptr<jit::CompiledStep> keep;
  auto [loss_diff, param_diff] =
      compare<nn::Adam>(nn::AdamOptions{.lr = 1e-2}, 50, data, [](int, nn::Adam&, nn::Adam&) {}, nullptr, &keep);
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
  CHECK(keep->compiles() == 1);
  CHECK(keep->cache_hits() == 49);
}

TEST_CASE("compile_step: 50 SGD steps (momentum, weight decay) with dropout equal 50 eager steps") {
  auto data = make_batches(5, 8);
  auto [loss_diff, param_diff] = compare<nn::SGD>(nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3},
                                                  50, data, [](int, nn::SGD&, nn::SGD&) {});
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
}

TEST_CASE("compile_step: SGD with Nesterov momentum equals eager; dampening is refused by name") {
  auto data = make_batches(5, 8);
  auto [loss_diff, param_diff] =
      compare<nn::SGD>(nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, 20, data,
                       [](int, nn::SGD&, nn::SGD&) {});
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
  CHECK_THROWS_WITH_AS(compare<nn::SGD>(nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.5}, 2, data,
                                        [](int, nn::SGD&, nn::SGD&) {}),
                       doctest::Contains("SGD: dampening 0.5 in a traced step"), volt::Error);
}

TEST_CASE("compile_step: 20 Adadelta steps (weight decay) with dropout equal 20 eager steps") {
  auto data = make_batches(5, 8);
  std::unique_ptr<jit::CompiledStep> keep;
  auto [loss_diff, param_diff] = compare<nn::Adadelta>(
      nn::AdadeltaOptions{.lr = 1.0, .weight_decay = 1e-3}, 20, data,
      [](int i, nn::Adadelta& a, nn::Adadelta& b) {  // a scheduler: a run-time scalar
        a.set_lr(i < 10 ? 1.0 : 0.5);
        b.set_lr(i < 10 ? 1.0 : 0.5);
      },
      nullptr, &keep);
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
  CHECK(keep->compiles() == 1);
  // Parameters, their two accumulators, and the learning rate: all state.
  CHECK(keep->last_traces().back().inputs.size() == 3 * 6 + 1 + 2);
}

TEST_CASE("compile_step: changing the learning rate mid-run does not recompile") {
  auto data = make_batches(5, 8);
  std::unique_ptr<jit::CompiledStep> keep;
  auto [loss_diff, param_diff] = compare<nn::Adam>(
      nn::AdamOptions{.lr = 1e-2}, 30, data,
      [](int i, nn::Adam& a, nn::Adam& b) {
        const double lr = i < 10 ? 1e-2 : i < 20 ? 3e-3 : 1e-3;
        a.set_lr(lr);
        b.set_lr(lr);
      },
      nullptr, &keep);
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
  CHECK(keep->compiles() == 1);
}

TEST_CASE("compile_step: a new batch size recompiles once, with its reason, and still matches") {
  auto small = make_batches(3, 8), large = make_batches(3, 13);
  std::vector<Batch> mixed;
  for (int i = 0; i < 3; ++i) mixed.push_back(small[static_cast<size_t>(i)]);
  for (int i = 0; i < 3; ++i) mixed.push_back(large[static_cast<size_t>(i)]);
  std::unique_ptr<jit::CompiledStep> keep;
  // Steps 0-2 at batch 8, 3-5 at batch 13, then 8 again (the cache has it).
  auto [loss_diff, param_diff] =
      compare<nn::Adam>(nn::AdamOptions{.lr = 1e-2}, 7, mixed, [](int, nn::Adam&, nn::Adam&) {}, nullptr, &keep);
  CHECK(loss_diff < 1e-6);
  CHECK(param_diff < 1e-6);
  CHECK(keep->compiles() == 2);
  CHECK(keep->last_miss_reason().find("input0=cpu f32[13, 20]") != std::string::npos);
}

TEST_CASE("compile_step: a user optimizer written with volt ops traces the same way") {
  // Sign descent with a moment: p -= lr * sign(m), m = 0.5 m + g.
  struct SignDescent {
    std::vector<Tensor> p, m;
    double lr = 0.01;
    explicit SignDescent(std::vector<Tensor> params) : p(std::move(params)) {
      for (const Tensor& t : p) m.push_back(Tensor::zeros(t.sizes()));
    }
    void step() {
      NoGradGuard no_grad;
      for (size_t i = 0; i < p.size(); ++i) {
        m[i].copy_(m[i] * 0.5 + p[i].grad());
        p[i].copy_(p[i] - where(gt(m[i], 0.0), lr, where(lt(m[i], 0.0), -lr, 0.0)));
      }
    }
    void zero_grad() {
      for (Tensor& t : p) t.impl()->grad.reset();
    }
  };
  auto data = make_batches(4, 8);
  auto eager_net = make_net(0.0), compiled_net = make_net(0.0);
  SignDescent eager_opt(eager_net->parameters()), compiled_opt(compiled_net->parameters());
  std::vector<Tensor> state = compiled_opt.m;
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) { return eager_step(*compiled_net, compiled_opt, x, y); },
      {.state = {*compiled_net, state}});
  for (int i = 0; i < 12; ++i) {
    const Batch& b = data[static_cast<size_t>(i) % data.size()];
    double le = eager_step(*eager_net, eager_opt, b.x, b.y).item_double();
    double lc = step(b.x, b.y).item_double();
    CHECK(std::fabs(le - lc) < 1e-6);
  }
  auto pe = eager_net->parameters(), pc = compiled_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pc[i], pe[i]) < 1e-6);
  CHECK(step.compiles() == 1);
}

TEST_CASE("compile_step: no tensor memory is allocated per step after the first") {
  auto data = make_batches(3, 8);
  auto net = make_net(0.2);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return eager_step(*net, opt, x, y); },
                                {.state = {*net, opt}, .reuse_outputs = true});
  step(data[0].x, data[0].y);
  const uint64_t before = Storage::allocation_count();
  for (int i = 0; i < 10; ++i) step(data[static_cast<size_t>(i % 3)].x, data[static_cast<size_t>(i % 3)].y);
  CHECK(Storage::allocation_count() - before == 0);
  CHECK(step.arena_bytes() > 0);
  // The eager step, for contrast, allocates every time (so the counter counts).
  const uint64_t eager_before = Storage::allocation_count();
  eager_step(*net, opt, data[0].x, data[0].y);
  CHECK(Storage::allocation_count() - eager_before > 10);
}

TEST_CASE("compile_step: gradients reach .grad only when asked for") {
  auto data = make_batches(1, 8);
  auto net = make_net(0.0), twin = make_net(0.0);
  nn::SGD opt(net->parameters(), {.lr = 0.1}), twin_opt(twin->parameters(), {.lr = 0.1});
  auto quiet = jit::compile_step([&](const Tensor& x, const Tensor& y) { return eager_step(*net, opt, x, y); },
                                 {.state = {*net, opt}});
  quiet(data[0].x, data[0].y);
  for (const Tensor& p : net->parameters()) CHECK(!p.grad().defined());
  auto loud = jit::compile_step([&](const Tensor& x, const Tensor& y) { return eager_step(*twin, twin_opt, x, y); },
                                {.state = {*twin, twin_opt}, .write_grads = true});
  // Eager reference: the gradient at the parameters before the update.
  auto ref = make_net(0.0);
  Tensor l = nn::functional::cross_entropy((*ref)(data[0].x), data[0].y);
  l.backward();
  loud(data[0].x, data[0].y);
  auto pt = twin->parameters(), pr = ref->parameters();
  for (size_t i = 0; i < pt.size(); ++i) {
    REQUIRE(pt[i].grad().defined());
    CHECK(max_abs_diff(pt[i].grad(), pr[i].grad()) < 1e-6);
  }
}

TEST_CASE("compile_step: the step's trace prints in sections and checks out") {
  auto data = make_batches(1, 8);
  auto net = make_net(0.2);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return eager_step(*net, opt, x, y); },
                                {.state = {*net, opt}});
  step(data[0].x, data[0].y);
  std::string s = step.last_trace_str();
  size_t f = s.find("# ---- forward ----"), l = s.find("# ---- loss ----"), b = s.find("# ---- backward ----"),
         o = s.find("# ---- optimizer ----");
  REQUIRE(f != std::string::npos);
  REQUIRE(l != std::string::npos);
  REQUIRE(b != std::string::npos);
  REQUIRE(o != std::string::npos);
  CHECK(f < l);
  CHECK(l < b);
  CHECK(b < o);

  // Every trace of the pipeline passes the trace checker, and by hand: each
  // value defined before use, never used after its del, every returned value defined.
  for (const jit::Trace& t : step.last_traces()) {
    CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
    std::unordered_set<int64_t> live, deleted;
    for (const Tensor& in : t.inputs) live.insert(jit::id_of(in));
    for (const jit::BoundSymbol& bs : t.bsyms) {
      for (const Tensor& a : jit::tensor_args(bs)) {
        CHECK_MESSAGE(live.count(jit::id_of(a)), t.provenance << ": a value is used before it is defined");
        CHECK_MESSAGE(!deleted.count(jit::id_of(a)), t.provenance << ": a value is used after its del");
      }
      for (const Tensor& out : bs.outputs) live.insert(jit::id_of(out));
      for (const Tensor& d : bs.del_after) deleted.insert(jit::id_of(d));
    }
    for (const Tensor& out : t.outputs) {
      CHECK_MESSAGE(live.count(jit::id_of(out)), t.provenance << ": a returned value is never defined");
      CHECK_MESSAGE(!deleted.count(jit::id_of(out)), t.provenance << ": a returned value was deleted");
    }
  }
  // The outputs: the loss, then every parameter, both moments of each and the step count.
  CHECK(step.last_traces().back().outputs.size() == 1 + 3 * net->parameters().size() + 1);
}

TEST_CASE("compile_step: bad use is a clear error") {
  auto net = make_net(0.0);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto data = make_batches(1, 8);
  // The optimizer is not passed as state: its moments are not known to the step.
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return eager_step(*net, opt, x, y); },
                                {.state = {*net}});
  CHECK_THROWS_WITH_AS(step(data[0].x, data[0].y), doctest::Contains("compile_step"), Error);
  // The parameters got their data back.
  for (const Tensor& p : net->parameters()) CHECK(p.has_data());
  CHECK_NOTHROW(eager_step(*net, opt, data[0].x, data[0].y));
}
