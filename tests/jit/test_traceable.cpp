// Everything traceable: factories inside traced code, losses, several outputs.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/jit/check.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;

namespace {

double max_abs(const Tensor& a, const Tensor& b) { return volt::testing::max_abs_diff(a, b); }

std::string all_traces(const jit::JitFunction& f) {
  std::string s;
  for (const auto* list : {&jit::last_traces(f), &jit::last_backward_traces(f)})
    for (const jit::Trace& t : *list) s += t.str();
  return s;
}

}  // namespace

TEST_CASE("traceable: arange inside traced code is a prim, printed and run like eager") {
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(in[0], Tensor::arange(2.0, 8.0, 2.0, DType::f32))};
  };
  auto jf = jit::jit(fn, {"x"});
  Tensor x = Tensor::from_vector<float>({10, 20, 30});
  CHECK(jf(x).to_vector<float>() == std::vector<float>{12, 24, 36});
  CHECK(jit::last_traces(jf).front().str().find("prims.arange((3,), 2.0, step=2.0, device=cpu, dtype=f32)") !=
        std::string::npos);
}

TEST_CASE("traceable: jit of a function calling cross_entropy equals eager, loss and gradients") {
  manual_seed(7);
  Tensor x = Tensor::randn({6, 5}), w = Tensor::randn({5, 4});
  Tensor target = Tensor::from_vector<int64_t>({0, 3, 1, 2, 3, 0});
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(matmul(in[0], in[1]), in[2])};
  };
  // Eager: loss and gradients by the tape.
  Tensor xe = x.detach().requires_grad_(true), we = w.detach().requires_grad_(true);
  Tensor loss_e = fn({xe, we, target}).at(0);
  loss_e.backward();

  // The jitted function, differentiated by the jit (forward and backward traces).
  Tensor xj = x.detach().requires_grad_(true), wj = w.detach().requires_grad_(true);
  auto jf = jit::jit(fn, {"x", "w", "target"});
  Tensor loss_j = jf({xj, wj, target}).at(0);
  loss_j.backward();
  CHECK(max_abs(loss_j, loss_e) < 1e-6);
  CHECK(max_abs(xj.grad(), xe.grad()) < 1e-6);
  CHECK(max_abs(wj.grad(), we.grad()) < 1e-6);
  REQUIRE(!jit::last_backward_traces(jf).empty());
  const std::string s = all_traces(jf);
  CHECK(s.find("volt.cross_entropy(t0, target)") != std::string::npos);
  CHECK(s.find("prims.arange((4,), 0.0, step=1.0, device=cpu, dtype=i64)") != std::string::npos);
  // The loss's elementwise work is fused.
  CHECK(jit::compile_stats(jf).fusions >= 2);

  // value_and_grad: one program returning the loss and both gradients.
  auto vg = jit::value_and_grad(jit::jit(fn, {"x", "w", "target"}));
  std::vector<Tensor> r = vg({x, w, target});
  REQUIRE(r.size() == 3);
  CHECK(max_abs(r[0], loss_e) < 1e-6);
  CHECK(max_abs(r[1], xe.grad()) < 1e-6);
  CHECK(max_abs(r[2], we.grad()) < 1e-6);
}

TEST_CASE("traceable: nll_loss of log_softmax under jit equals eager") {
  manual_seed(8);
  Tensor x = Tensor::randn({4, 3});
  Tensor target = Tensor::from_vector<int64_t>({2, 0, 1, 1});
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nll_loss(log_softmax(in[0], 1), in[1])}; };
  auto g = jit::grad(jit::jit(fn, {"x", "target"}));
  Tensor xe = x.detach().requires_grad_(true);
  fn({xe, target}).at(0).backward();
  CHECK(max_abs(g({x, target}).at(0), xe.grad()) < 1e-6);
}

TEST_CASE("traceable: an out-of-range target is an error with eager's message under jit and on the lazy device") {
  const char* message = "target values must lie in [0, 10), got [3, 10]";
  Tensor logits = Tensor::zeros({2, 10});
  Tensor bad = Tensor::from_vector<int64_t>({3, 10}), good = Tensor::from_vector<int64_t>({3, 9});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, bad), doctest::Contains(message), volt::Error);
  // Traced: the check runs when the program runs, on the values it is given.
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1])}; };
  auto jf = jit::jit(fn, {"logits", "target"});
  CHECK(std::fabs(jf({logits, good}).at(0).item<float>() - std::log(10.0f)) < 1e-6);
  CHECK_THROWS_WITH_AS(jf({logits, bad}), doctest::Contains(message), volt::Error);
  CHECK(jit::cache_misses(jf) == 1);  // the same program, not a retrace
  // Lazy: the check runs when the targets' values exist.
  Tensor ll = logits.to(kLazy);
  CHECK(std::fabs(cross_entropy(ll, good.to(kLazy)).item<float>() - std::log(10.0f)) < 1e-6);
  CHECK_THROWS_WITH_AS(cross_entropy(ll, bad.to(kLazy)).item<float>(), doctest::Contains(message), volt::Error);
}

TEST_CASE("traceable: a two-output function under grad gets its forward/backward pair and fusions, equal to eager") {
  manual_seed(9);
  Tensor x = Tensor::randn({3, 4}), w = Tensor::randn({4});
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor h = mul(in[0], in[1]);
    return std::vector<Tensor>{tanh(h), sum(mul(h, h))};
  };
  auto loss_of = [](const std::vector<Tensor>& outs) { return add(sum(mul(outs[0], 2.0)), mul(outs[1], 3.0)); };
  Tensor xe = x.detach().requires_grad_(true), we = w.detach().requires_grad_(true);
  loss_of(fn({xe, we})).backward();

  Tensor xj = x.detach().requires_grad_(true), wj = w.detach().requires_grad_(true);
  auto jf = jit::jit(fn, {"x", "w"});
  std::vector<Tensor> outs = jf({xj, wj});
  REQUIRE(outs.size() == 2);
  REQUIRE(!jit::last_backward_traces(jf).empty());
  CHECK(jit::last_traces(jf).back().str().find("def augmented_forward_fn(x, w)") != std::string::npos);
  loss_of(outs).backward();
  CHECK(max_abs(xj.grad(), xe.grad()) < 1e-5);
  CHECK(max_abs(wj.grad(), we.grad()) < 1e-5);
  // Fused forward and backward.
  CHECK(jit::last_traces(jf).back().str().find("cpuFusion0") != std::string::npos);
  CHECK(jit::last_backward_traces(jf).back().str().find("cpuFusion0") != std::string::npos);
  // Only one output used: the other's cotangent is zero.
  Tensor xk = x.detach().requires_grad_(true), wk = w.detach().requires_grad_(true);
  Tensor xf = x.detach().requires_grad_(true), wf = w.detach().requires_grad_(true);
  sum(jf({xk, wk})[0]).backward();
  sum(fn({xf, wf})[0]).backward();
  CHECK(max_abs(xk.grad(), xf.grad()) < 1e-5);
}
