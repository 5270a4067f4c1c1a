// The lazy device: recording, running when a value is needed, graph keys and
// the compiled-graph cache, fallback, the size limit, and a training step that
// matches eager mode.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <volt/jit/lazy/lazy.h>
#include <volt/jit/trace.h>
#include <volt/jit/tracer.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

Tensor add_two_maybe(const Tensor& t, const Tensor& maybe) {
  if (maybe) return t + 2.0;
  return t;
}

// Starts a test from a clean slate: nothing pending, no counters, no cached graphs.
void fresh() {
  lazy::mark_step();
  lazy::clear_cache();
  lazy::metrics::reset();
}

}  // namespace

TEST_CASE("lazy: ops record instead of running, values run when needed") {
  fresh();
  Tensor a = Tensor::from_vector<float>({1, 2, 3}).to(kLazy);
  CHECK(a.device() == kLazy);
  CHECK(lazy::has_value(a));  // a transfer is data
  Tensor b = a * 2.0 + 1.0;
  CHECK_FALSE(lazy::has_value(b));
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 0);
  CHECK(b.to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(lazy::has_value(b));
  CHECK(lazy::metrics::counter_value("RunGraph.value_needed") == 1);
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("Transfer.to_lazy") == 1);
  CHECK(lazy::metrics::counter_value("Transfer.to_host") == 1);
  // Printing runs the graph and names the device.
  CHECK(to_string(a - 1.0) == "tensor([0., 1., 2.], device='lazy')");
  // A one-element value, read by item().
  CHECK(a.sum().item<float>() == 6.0f);
}

TEST_CASE("lazy: add_two_maybe takes the right branch for both inputs; a one-shot trace does not") {
  fresh();
  Tensor t = Tensor::ones({1});
  Tensor no = Tensor::from_vector<bool>({false}), yes = Tensor::from_vector<bool>({true});
  // Eager reference.
  CHECK(add_two_maybe(t, no).item<float>() == 1.0f);
  CHECK(add_two_maybe(t, yes).item<float>() == 3.0f);

  // The lazy device reads `maybe` when the branch needs it.
  Tensor tl = t.to(kLazy);
  Tensor r_no = add_two_maybe(tl, no.to(kLazy));
  Tensor r_yes = add_two_maybe(tl, yes.to(kLazy));
  CHECK(r_no.to(kCPU).item<float>() == 1.0f);
  CHECK(r_yes.to(kCPU).item<float>() == 3.0f);

  // The branch condition may itself be pending: reading it runs its own graph.
  Tensor x = Tensor::from_vector<float>({-4.0f}).to(kLazy);
  Tensor cond_graph = x > 0.0;
  CHECK_FALSE(lazy::has_value(cond_graph));
  CHECK(add_two_maybe(x, cond_graph).to(kCPU).item<float>() == -4.0f);
  Tensor y = Tensor::from_vector<float>({5.0f}).to(kLazy);
  CHECK(add_two_maybe(y, y > 0.0).to(kCPU).item<float>() == 7.0f);

  // Each branch has its own graph: t + 2 and t are different programs.
  CHECK(lazy::graph_hash({tl + 2.0}) != lazy::graph_hash({tl}));

  // A trace recorded once with maybe = false bakes that branch in.
  Tensor maybe_input = no;
  auto traced = jit::trace_function(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{maybe_input.item<bool>() ? in[0] + 2.0 : in[0]};
      },
      {t}, {"t"});
  CHECK(jit::interpret(traced.trace, {t})[0].item<float>() == 1.0f);
  maybe_input = yes;  // the trace cannot see it: still the false branch
  CHECK(jit::interpret(traced.trace, {t})[0].item<float>() == 1.0f);
}

TEST_CASE("lazy: graph hash ignores data and scalar values, not shapes or structure") {
  fresh();
  auto program = [](const Tensor& x, const Tensor& w, double lr) { return (x * w - lr * x).sum({1}); };
  Tensor x1 = Tensor::randn({4, 3}).to(kLazy), w1 = Tensor::randn({4, 3}).to(kLazy);
  Tensor x2 = Tensor::randn({4, 3}).to(kLazy), w2 = Tensor::randn({4, 3}).to(kLazy);
  Tensor x3 = Tensor::randn({5, 3}).to(kLazy), w3 = Tensor::randn({5, 3}).to(kLazy);
  uint64_t h1 = lazy::graph_hash({program(x1, w1, 0.1)});
  CHECK(lazy::graph_hash({program(x2, w2, 0.1)}) == h1);   // new data
  CHECK(lazy::graph_hash({program(x1, w1, 0.01)}) == h1);  // new learning rate
  CHECK(lazy::graph_hash({program(x3, w3, 0.1)}) != h1);   // new shape
  CHECK(lazy::graph_hash({program(x1.to(DType::f64), w1.to(DType::f64), 0.1)}) != h1);  // new dtype
  // Sharing is structure: x * x reads one input, x * w two.
  CHECK(lazy::graph_hash({x1 * x1}) != lazy::graph_hash({x1 * w1}));
  CHECK(lazy::graph_hash({x1 * w1}) == lazy::graph_hash({x2 * w2}));
  // Data hashes by shape and dtype only.
  CHECK(lazy::graph_hash({x1}) == lazy::graph_hash({w2}));
  CHECK(lazy::graph_hash({x1}) != lazy::graph_hash({x3}));

  // The same program with new values and a new scalar runs the cached graph, with the new values.
  Tensor r1 = program(x1, w1, 0.1);
  lazy::mark_step();
  Tensor r2 = program(x2, w2, 0.5);
  lazy::mark_step();
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("CachedCompile") == 1);
  Tensor want = (x2.to(kCPU) * w2.to(kCPU) - 0.5 * x2.to(kCPU)).sum({1});
  CHECK(max_abs_diff(r2, want) < 1e-6);
}

TEST_CASE("lazy: mark_step runs every live tensor's graph once") {
  fresh();
  Tensor a = Tensor::full({3}, 2.0).to(kLazy);
  Tensor b = a * a, c = b + a;  // c shares b
  lazy::mark_step();
  CHECK(lazy::has_value(b));
  CHECK(lazy::has_value(c));
  CHECK(lazy::metrics::counter_value("MarkStep") == 1);
  CHECK(lazy::metrics::counter_value("RunGraph.mark_step") == 1);
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(c.to_vector<float>() == std::vector<float>{6, 6, 6});
  // Nothing pending: mark_step counts but runs nothing.
  lazy::mark_step();
  CHECK(lazy::metrics::counter_value("MarkStep") == 2);
  CHECK(lazy::metrics::counter_value("RunGraph.mark_step") == 1);
  // In place: a gets a new pending value; b, computed from the old one, keeps its own.
  a.add_(1.0);
  CHECK_FALSE(lazy::has_value(a));
  CHECK(a.to_vector<float>() == std::vector<float>{3, 3, 3});
  CHECK(b.to_vector<float>() == std::vector<float>{4, 4, 4});
  auto names = lazy::metrics::counter_names();
  CHECK(std::find(names.begin(), names.end(), "MarkStep") != names.end());
  CHECK(lazy::metrics::report().find("UncachedCompile: ") != std::string::npos);
}

TEST_CASE("lazy: ops with no lowering fall back, counted, with the right values and gradients") {
  fresh();
  lazy::set_forced_fallback({"argmax", "exp"});
  Tensor x = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 1.0f}, {2, 3});
  Tensor xl = (x.to(kLazy) * 1.0).detach().requires_grad_();  // a pending value as input
  Tensor am = (xl * 2.0).argmax(1);
  CHECK(lazy::metrics::counter_value("Fallback.argmax") == 1);
  CHECK(lazy::metrics::counter_value("RunGraph.fallback") == 1);
  CHECK(lazy::has_value(am));  // a fallback's result is a new leaf
  CHECK(am.to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  // Autograd goes through a fallback op: d/dx sum(exp(x) * 3) = 3 exp(x).
  Tensor loss = (volt::exp(xl) * 3.0).sum();
  CHECK(lazy::metrics::counter_value("Fallback.exp") == 1);
  loss.backward();
  Tensor want = volt::exp(x) * 3.0;
  CHECK(max_abs_diff(xl.grad(), want) < 1e-5);
  lazy::set_forced_fallback({});
}

TEST_CASE("lazy: a custom op with its own kernel falls back, with its name on the counter") {
  fresh();
  CustomOpDef def;
  def.name = "lazy_test_twice";
  def.meta = [](const std::vector<Value>& a) {
    return std::vector<TensorMeta>{{a[0].tensor.sizes(), a[0].tensor.dtype(), a[0].tensor.device()}};
  };
  def.kernel = [](const std::vector<Value>& a) {
    REQUIRE(a[0].tensor.device().is_cpu());  // the fallback hands it data, not lazy tensors
    auto v = a[0].tensor.to_vector<float>();
    for (float& x : v) x *= 2;
    return std::vector<Tensor>{Tensor::from_vector<float>(v, a[0].tensor.sizes())};
  };
  const int64_t id = register_custom_op(def);
  Tensor x = Tensor::from_vector<float>({1, 2, 3}).to(kLazy) + 1.0;
  Tensor y = dispatch1(custom_call(id, {x})) - 1.0;
  CHECK(lazy::metrics::counter_value("Fallback.lazy_test_twice") == 1);
  CHECK(y.to_vector<float>() == std::vector<float>{3, 5, 7});
  // On a value that exists already it cuts no graph: not a fallback.
  Tensor z = Tensor::from_vector<float>({1, 2, 3}).to(kLazy);
  Tensor w = dispatch1(custom_call(id, {z}));
  CHECK(lazy::metrics::counter_value("Fallback.lazy_test_twice") == 1);
  CHECK(lazy::metrics::counter_value("DataOp.lazy_test_twice") == 1);
  CHECK(lazy::metrics::counter_value("RunGraph.fallback") == 1);
  CHECK(w.to_vector<float>() == std::vector<float>{2, 4, 6});
}

TEST_CASE("lazy: a training step's target check on the batch is no fallback") {
  fresh();
  Tensor logits = (Tensor::randn({4, 5}).to(kLazy) * 2.0).requires_grad_();
  Tensor target = Tensor::from_vector<int64_t>({0, 4, 2, 1}).to(kLazy);
  Tensor loss = cross_entropy(logits, target);
  loss.backward();
  lazy::mark_step();
  CHECK(lazy::metrics::counter_value("Fallback.check_target_range") == 0);
  CHECK(lazy::metrics::counter_value("DataOp.check_target_range") == 1);
  CHECK(lazy::metrics::counter_value("RunGraph.fallback") == 0);
  // A bad target still fails with nll_loss's message.
  Tensor bad = Tensor::from_vector<int64_t>({0, 9, 2, 1}).to(kLazy);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, bad), doctest::Contains("target values must lie in [0, 5)"), Error);
}

TEST_CASE("lazy: a graph over the size limit is cut and run") {
  fresh();
  lazy::set_graph_size_limit(10);
  Tensor a = Tensor::zeros({4}).to(kLazy);
  for (int i = 0; i < 35; ++i) a = a + 1.0;
  CHECK(lazy::metrics::counter_value("RunGraph.size_limit") == 3);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 35.0f));
  lazy::set_graph_size_limit(100000);
}

TEST_CASE("lazy: the compiled-graph cache drops the least recently used graph") {
  fresh();
  lazy::set_cache_size(1);
  Tensor x = Tensor::ones({3}).to(kLazy);
  auto f = [&] { return (x + 1.0).to_vector<float>(); };
  auto g = [&] { return (x * x).to_vector<float>(); };
  f();
  f();
  CHECK(lazy::metrics::counter_value("CachedCompile") == 1);
  g();  // evicts f's graph
  f();
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 3);
  CHECK(lazy::cache_entries() == 1);
  lazy::set_cache_size(1024);
}

TEST_CASE("lazy: dump prints the pending graph in the trace format") {
  fresh();
  Tensor x = Tensor::ones({2, 3}).to(kLazy);
  Tensor y = volt::relu(x * 3.0 - 1.0);
  std::string s = lazy::dump(y);
  CHECK(s.find("def lazy_graph(d0, s0, s1):") != std::string::npos);  // relu's zeros are constants
  CHECK(s.find("# d0: \"cpu f32[2, 3]\"") != std::string::npos);
  CHECK(s.find("= prims.mul(d0, s0)") != std::string::npos);
  CHECK(s.find("prims.where(") != std::string::npos);
  CHECK(s.find("# runtime scalars: s0 = 3.0, s1 = 1.0\n") != std::string::npos);
  CHECK(s.find("prims.le(t1, 0.0)") != std::string::npos);  // relu: where(x <= 0, 0, x)
  CHECK_FALSE(lazy::has_value(y));  // dump does not run anything
}

TEST_CASE("lazy: the CUDA backend runs the same graph as the CPU one") {
  if (!cuda::is_available()) {
    MESSAGE("skipped: no CUDA backend or GPU here; choosing it must fail with a clear error");
    CHECK_THROWS_WITH_AS(lazy::set_backend(Device::cuda(0)), doctest::Contains("not available"), Error);
    CHECK(lazy::backend() == kCPU);
    return;
  }
  fresh();
  Tensor x = Tensor::randn({16, 8}), w = Tensor::randn({4, 8});
  auto program = [](const Tensor& a, const Tensor& b) { return volt::relu(volt::linear(a, b) * 0.5 - 0.1).sum({1}); };
  Tensor want = program(x, w);
  lazy::set_backend(Device::cuda(0));
  Tensor got = program(x.to(kLazy), w.to(kLazy));
  lazy::mark_step();
  CHECK(max_abs_diff(got, want) < 1e-4);
  lazy::set_backend(kCPU);
}

TEST_CASE("lazy: a view sees in-place writes to its base, as shared storage would") {
  fresh();
  Tensor a0 = Tensor::arange(6, DType::f32).reshape({2, 3});
  Tensor a = a0.to(kLazy);
  Tensor row = a.select(0, 1), at = a.t();
  Tensor before = row * 1.0;  // computed from the old value: keeps it
  a.add_(10.0);
  CHECK(row.to_vector<float>() == std::vector<float>{13, 14, 15});
  CHECK(at.to_vector<float>() == std::vector<float>{10, 13, 11, 14, 12, 15});
  CHECK(before.to_vector<float>() == std::vector<float>{3, 4, 5});
  a.mul_(2.0);
  CHECK(row.to_vector<float>() == std::vector<float>{26, 28, 30});
}

TEST_CASE("lazy: writing in place into a view is an error that says why") {
  fresh();
  Tensor a = Tensor::zeros({2, 3}).to(kLazy);
  Tensor row = a.select(0, 1);
  CHECK_THROWS_WITH_AS(row.fill_(1.0), doctest::Contains("view of a lazy tensor"), Error);
}

TEST_CASE("lazy: dropout draws the same mask as eager mode for the same seed") {
  fresh();
  Tensor x = Tensor::ones({64, 33});
  manual_seed(7);
  Tensor eager = volt::dropout(x, 0.3, true);
  manual_seed(7);
  Tensor lazy_out = volt::dropout(x.to(kLazy), 0.3, true);
  CHECK(max_abs_diff(lazy_out, eager) == 0.0);
  CHECK(rng_state().offset == 64 * 33);  // the draw reserved its counters when recorded
}

TEST_CASE("lazy: an optimizer step records into the graph and lr is a runtime value") {
  fresh();
  for (int kind = 0; kind < 2; ++kind) {
    lazy::clear_cache();
    lazy::metrics::reset();
    Tensor w0 = Tensor::randn({5, 4});
    Tensor pe = w0.clone().requires_grad_(), pl = w0.to(kLazy).requires_grad_();
    std::unique_ptr<nn::Optimizer> oe, ol;
    if (kind == 0) {
      oe = std::make_unique<nn::SGD>(std::vector<Tensor>{pe}, nn::SGDOptions{.lr = 0.1});
      ol = std::make_unique<nn::SGD>(std::vector<Tensor>{pl}, nn::SGDOptions{.lr = 0.1});
    } else {
      oe = std::make_unique<nn::Adam>(std::vector<Tensor>{pe}, nn::AdamOptions{.lr = 0.05});
      ol = std::make_unique<nn::Adam>(std::vector<Tensor>{pl}, nn::AdamOptions{.lr = 0.05});
    }
    for (int step = 0; step < 5; ++step) {
      for (auto [p, o] : {std::pair{pe, oe.get()}, std::pair{pl, ol.get()}}) {
        o->zero_grad();
        ((p * p).sum() * (1.0 + step)).backward();  // the scale changes every step
        o->step();
      }
      lazy::mark_step();
    }
    CAPTURE(kind);
    CHECK(max_abs_diff(pl, pe) < 1e-6);
    CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
    CHECK(lazy::metrics::counter_value("CachedCompile") == 4);
  }
}

// Same seed, same batches: every step's loss and the final parameters agree.
// Dropout draws the same masks (its counters are reserved when recorded);
// the optimizers differ only in rounding (eager Adam is one fused CPU loop,
// lazy Adam the same rule as tensor ops), and so does the loss's gradient
// (eager runs cross_entropy as one fused kernel, lazy its decomposition).
// Adam turns such rounding into steps of up to lr where a gradient is near 0,
// hence 1e-4 on the parameters after 20 steps.
static void check_training_matches_eager(int64_t in, const std::vector<int64_t>& widths, double dropout, double lr) {
  fresh();
  const int steps = 20;
  const int64_t classes = widths.back();
  std::vector<Tensor> xs, ys;
  manual_seed(3);
  for (int i = 0; i < steps; ++i) {
    xs.push_back(Tensor::rand({8, in}));
    ys.push_back(Tensor::randint(0, classes, {8}));
  }
  auto make = [&] {
    manual_seed(11);
    return std::make_shared<nn::MLP>(in, widths, true, dropout);
  };
  auto eager_net = make(), lazy_net = make();
  lazy_net->to(kLazy);
  nn::CrossEntropyLoss loss_fn;
  nn::Adam eager_opt(eager_net->parameters(), {.lr = lr});
  nn::Adam lazy_opt(lazy_net->parameters(), {.lr = lr});

  std::vector<double> eager_losses, lazy_losses;
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    eager_opt.zero_grad();
    Tensor loss = loss_fn((*eager_net)(xs[i]), ys[i]);
    loss.backward();
    eager_opt.step();
    eager_losses.push_back(loss.item<double>());
  }
  manual_seed(5);
  for (int i = 0; i < steps; ++i) {
    lazy_opt.zero_grad();
    Tensor loss = loss_fn((*lazy_net)(xs[i].to(kLazy)), ys[i].to(kLazy));
    loss.backward();
    lazy_opt.step();
    lazy::mark_step();
    lazy_losses.push_back(loss.item<double>());  // already computed: no new graph
  }
  for (int i = 0; i < steps; ++i) CHECK(std::fabs(lazy_losses[i] - eager_losses[i]) < 1e-5);
  auto pe = eager_net->parameters(), pl = lazy_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pl[i], pe[i]) < 1e-4);
  CHECK(lazy::metrics::counter_value("UncachedCompile") == 1);
  CHECK(lazy::metrics::counter_value("CachedCompile") == steps - 1);
  CHECK(lazy::metrics::counter_value("RunGraph.value_needed") == 0);
  CHECK(lazy::metrics::counter_value("MarkStep") == steps);
}

TEST_CASE("lazy: an optimizer's update is laid out after the matmul it needs, as one fused kernel") {
  fresh();
  Tensor w = Tensor::randn({16, 12}).to(kLazy).requires_grad_();
  nn::Adam opt({w}, {.lr = 0.1});
  Tensor x = Tensor::randn({4, 16}).to(kLazy);
  volt::matmul(x, w).sum().backward();
  opt.step();
  lazy::mark_step();
  REQUIRE(!lazy::last_compiled_traces().empty());
  // m, v and w are updated from w's gradient (a matmul) by one chain of
  // elementwise prims; the chain must not be cut by the matmul's subgraph.
  int fusions = 0;
  for (const jit::BoundSymbol& b : lazy::last_compiled_traces().back().bsyms)
    if (b.is_fusion() && b.outputs.at(0).sizes() == Shape{16, 12}) ++fusions;
  CHECK(fusions == 1);
}

TEST_CASE("lazy: a parameter's first gradient is the backward's own value, not a copy of it") {
  fresh();
  Tensor w = Tensor::randn({16, 12}).to(kLazy).requires_grad_();
  Tensor x = Tensor::randn({4, 16}).to(kLazy);
  volt::matmul(x, w).sum().backward();
  std::string g = lazy::dump(w.grad());
  CHECK(g.find("prims.matmul(") != std::string::npos);
  CHECK(g.find("prims.copy(") == std::string::npos);
  // A gradient someone else still holds is not taken: `w2 + 0`'s VJP passes
  // the caller's seed through, and writing into the seed afterwards must not
  // change w2's gradient.
  Tensor w2 = Tensor::ones({3}).to(kLazy).requires_grad_();
  Tensor seed = Tensor::full({3}, 2.0).to(kLazy);
  volt::add(w2, 0.0).backward(seed);
  seed.add_(1.0);
  CHECK(w2.grad().to(kCPU).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("lazy: an MLP training step matches eager mode over 20 steps, dropout included") {
  check_training_matches_eager(24, {32, 32, 5}, 0.2, 1e-2);
}

TEST_CASE("lazy: the seed model's training step matches eager mode over 20 steps") {
  check_training_matches_eager(784, {784, 784, 784, 28, 10}, 0.1, 1e-3);
}

TEST_CASE("lazy: errors name what was expected") {
  CHECK_THROWS_WITH_AS(lazy::set_backend(kLazy), doctest::Contains("expected cpu or cuda"), Error);
  CHECK_THROWS_WITH_AS(lazy::graph_hash({Tensor::ones({2})}), doctest::Contains("expected lazy tensors"), Error);
  Tensor a = Tensor::ones({2}).to(kLazy);
  CHECK_THROWS_WITH_AS(a + Tensor::ones({2}), doctest::Contains("one device"), Error);
}
