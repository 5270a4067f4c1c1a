// The compiled step under use it must survive: two threads calling one step,
// many batch sizes (a bounded cache of programs), a parameter frozen after the
// first call, and optimizer state loaded after the step took its handles.
#include <doctest/doctest.h>

#include "tests/jit/step/eager_step.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <volt/jit/step/step.h>
#include <volt/nn/checkpoint.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/memory_stats.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "sanitized.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(7);
  return std::make_shared<nn::MLP>(20, std::vector<int64_t>{32, 16, 5}, true, 0.0);
}

struct Batch {
  Tensor x, y;
};

Batch make_batch(int64_t rows, uint64_t seed) {
  manual_seed(seed);
  return {Tensor::randn({rows, 20}), Tensor::randint(0, 5, {rows})};
}

using volt::testing::eager_step;

template <class Opt>
jit::CompiledStep make_step(nn::MLP& net, Opt& opt, size_t max_cached_shapes = 16) {
  return jit::compile_step([&net, &opt](const Tensor& x, const Tensor& y) { return eager_step(net, opt, x, y); },
                           {.state = {net, opt}, .max_cached_shapes = max_cached_shapes});
}

double param_diff(nn::MLP& a, nn::MLP& b) {
  double d = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, max_abs_diff(pa[i], pb[i]));
  return d;
}

}  // namespace

TEST_CASE("compile_step: two threads calling one step get the losses one thread gets") {
  // lr 0: the parameters never move, so every call's loss is known in advance.
  auto net = make_net();
  nn::SGD opt(net->parameters(), {.lr = 0.0});
  auto step = make_step(*net, opt);
  // Two batch sizes, one per thread: the threads also switch the step's program.
  const Batch a = make_batch(8, 1), b = make_batch(13, 2);
  const double want_a = step(a.x, a.y).item_double(), want_b = step(b.x, b.y).item_double();
  REQUIRE(std::isfinite(want_a));
  REQUIRE(want_a != want_b);
  const int calls = volt::testing::kSanitized ? 20 : 200;
  std::vector<double> got_a, got_b;
  std::thread ta([&] {
    for (int i = 0; i < calls; ++i) got_a.push_back(step(a.x, a.y).item_double());
  });
  std::thread tb([&] {
    for (int i = 0; i < calls; ++i) got_b.push_back(step(b.x, b.y).item_double());
  });
  ta.join();
  tb.join();
  int wrong = 0;
  for (double v : got_a) wrong += v != want_a;
  for (double v : got_b) wrong += v != want_b;
  CHECK(wrong == 0);
  CHECK(step.compiles() == 2);
  CHECK(step.cache_hits() == 2 * calls);
}

TEST_CASE("compile_step: at most max_cached_shapes programs are kept, the least recently used dropped") {
  auto eager_net = make_net(), net = make_net();
  nn::SGD eager_opt(eager_net->parameters(), {.lr = 0.05}), opt(net->parameters(), {.lr = 0.05});
  auto step = make_step(*net, opt, 2);
  // A is used between every other shape: least-recently-used keeps it (first
  // in, first out would drop it when C comes).
  std::vector<Batch> seq;
  const Batch a = make_batch(4, 10);
  for (int64_t rows : {5, 6, 7, 9}) {
    seq.push_back(a);
    seq.push_back(make_batch(rows, static_cast<uint64_t>(rows)));
  }
  seq.push_back(a);
  size_t most_arena = 0;
  for (const Batch& bt : seq) {
    const double want = eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double();
    CHECK(std::fabs(step(bt.x, bt.y).item_double() - want) < 1e-6);
    CHECK(step.cached_shapes() <= 2);
    most_arena = std::max(most_arena, step.arena_bytes());
  }
  CHECK(step.compiles() == 5);  // A once, then each of the four others
  CHECK(param_diff(*eager_net, *net) < 1e-6);
  // Many shapes, each used once: the count stays at the bound, and so do the
  // arenas (freed with their programs), with results still right after
  // programs were dropped and compiled again.
  const uint64_t live_before = storage_bytes().live;
  for (int64_t rows = 1; rows <= 12; ++rows) {
    const Batch bt = make_batch(rows % 6 + 1, static_cast<uint64_t>(100 + rows));
    const double want = eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double();
    CHECK(std::fabs(step(bt.x, bt.y).item_double() - want) < 1e-6);
    CHECK(step.cached_shapes() <= 2);
    most_arena = std::max(most_arena, step.arena_bytes());
    CHECK(step.cached_arena_bytes() <= 2 * most_arena);
  }
  CHECK(param_diff(*eager_net, *net) < 1e-6);
  // Tensor storage live now: no more than the two programs' arenas more than
  // before the loop (six more shapes' arenas, were none freed).
  const uint64_t live_after = storage_bytes().live;
  CHECK(live_after <= live_before + 2 * most_arena);
  CHECK_THROWS_WITH_AS(make_step(*net, opt, 0), doctest::Contains("max_cached_shapes"), Error);
}

TEST_CASE("compile_step: a parameter frozen after the first call is no longer trained, as in eager") {
  auto eager_net = make_net(), net = make_net();
  // SGD with momentum: a frozen parameter's buffer must stay as it was too.
  const nn::SGDOptions o{.lr = 0.05, .momentum = 0.9};
  nn::SGD eager_opt(eager_net->parameters(), o), opt(net->parameters(), o);
  auto step = make_step(*net, opt);
  const Batch bt = make_batch(8, 3);
  for (int i = 0; i < 3; ++i) {
    const double want = eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double();
    CHECK(std::fabs(step(bt.x, bt.y).item_double() - want) < 1e-6);
  }
  Tensor frozen = net->parameters()[0];
  eager_net->parameters()[0].requires_grad_(false);
  frozen.requires_grad_(false);
  const Tensor before = frozen.clone();
  for (int i = 0; i < 3; ++i) {
    const double want = eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double();
    CHECK(std::fabs(step(bt.x, bt.y).item_double() - want) < 1e-6);
  }
  CHECK(max_abs_diff(frozen, before) == 0);
  CHECK(param_diff(*eager_net, *net) < 1e-6);
  CHECK(step.compiles() == 2);
  CHECK(step.last_miss_reason().find("requires_grad") != std::string::npos);
  // Thawed: trained again (the first program, still cached).
  eager_net->parameters()[0].requires_grad_(true);
  frozen.requires_grad_(true);
  const double want = eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double();
  CHECK(std::fabs(step(bt.x, bt.y).item_double() - want) < 1e-6);
  CHECK(max_abs_diff(frozen, before) > 0);
  CHECK(param_diff(*eager_net, *net) < 1e-6);
  CHECK(step.compiles() == 2);
}

TEST_CASE("compile_step: optimizer state loaded before or after the first call is the state it runs on") {
  const fs::path dir = fs::temp_directory_path() / ("volt-test-step-resume-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Batch bt = make_batch(8, 4), other = make_batch(8, 5);
  // The checkpoint: 4 Adam steps.
  auto net = make_net();
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  auto step = make_step(*net, opt);
  for (int i = 0; i < 4; ++i) step(bt.x, bt.y);
  nn::save_checkpoint(dir.string(), *net, opt, {1, 4});
  // The reference: an eager run resumed from it, 5 steps.
  auto eager_net = make_net();
  nn::Adam eager_opt(eager_net->parameters(), {.lr = 1e-2});
  nn::load_checkpoint(dir.string(), *eager_net, eager_opt);
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) want.push_back(eager_step(*eager_net, eager_opt, bt.x, bt.y).item_double());

  // After the first call: train on (other data, so the moments move), load,
  // continue compiled.
  for (int i = 0; i < 3; ++i) step(other.x, other.y);
  nn::load_checkpoint(dir.string(), *net, opt);
  for (int i = 0; i < 5; ++i) CHECK(std::fabs(step(bt.x, bt.y).item_double() - want[static_cast<size_t>(i)]) < 1e-6);
  CHECK(param_diff(*eager_net, *net) < 1e-6);

  // Before the first call: a step made (its zero state taken), then the load.
  auto fresh_net = make_net();
  nn::Adam fresh_opt(fresh_net->parameters(), {.lr = 1e-2});
  auto fresh = make_step(*fresh_net, fresh_opt);
  nn::load_checkpoint(dir.string(), *fresh_net, fresh_opt);
  for (int i = 0; i < 5; ++i) CHECK(std::fabs(fresh(bt.x, bt.y).item_double() - want[static_cast<size_t>(i)]) < 1e-6);
  CHECK(param_diff(*eager_net, *fresh_net) < 1e-6);
  fs::remove_all(dir);
}
