// cross_entropy and nll_loss with PyTorch's options (tensor/cross_entropy.h):
// reduction none/mean/sum, ignore_index, label_smoothing; in eager mode (the
// fused kernel, with autograd), under the jit and on the lazy device (the
// decomposition), against plain f64 loops that follow PyTorch's documented
// formulas, and gradients against finite differences of those loops.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/nn/functional.h>
#include <volt/nn/loss.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/nn/cross_entropy_reference.h"

using namespace volt;
using volt::testing::CeCase;
using volt::testing::ce_cases;
using volt::testing::ce_targets;
using volt::testing::reference_ce;
using volt::testing::reference_ce_objective;

namespace {

constexpr int64_t kN = 6, kC = 5;

// The scalar each mode differentiates: sum_i w_i loss_i for None, w_0 * loss otherwise.
Tensor objective(const Tensor& loss, const Tensor& w) {
  return loss.dim() == 0 ? mul(loss, w.narrow(0, 0, 1).reshape({})) : sum(mul(loss, w));
}

// Central differences of the f64 reference objective, one logit at a time.
std::vector<double> finite_difference_grad(const std::vector<double>& x, const std::vector<int64_t>& t,
                                           const CrossEntropyOptions& o, const std::vector<double>& w) {
  std::vector<double> g(x.size());
  const double h = 1e-6;
  for (size_t k = 0; k < x.size(); ++k) {
    std::vector<double> up = x, down = x;
    up[k] += h;
    down[k] -= h;
    g[k] = (reference_ce_objective(up, kN, kC, t, o, w) - reference_ce_objective(down, kN, kC, t, o, w)) / (2 * h);
  }
  return g;
}

void check_values(const std::string& label, const std::vector<double>& got, const std::vector<double>& want,
                  double tol) {
  INFO(label);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (d > worst || std::isnan(d)) worst = std::isnan(d) ? INFINITY : d, at = i;
  }
  INFO("worst element " << at << ": got " << got[at] << ", want " << want[at]);
  CHECK(worst <= tol);
}

// One way of running the loss: (logits, target, options, weights) -> (loss, d objective / d logits).
using Mode = std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&, const CrossEntropyOptions&,
                                                    const Tensor&)>;

std::pair<Tensor, Tensor> eager_mode(const Tensor& x, const Tensor& t, const CrossEntropyOptions& o, const Tensor& w) {
  Tensor leaf = x.detach().requires_grad_(true);
  Tensor loss = cross_entropy(leaf, t, o);
  objective(loss, w).backward();
  return {loss.detach(), leaf.grad()};
}

std::pair<Tensor, Tensor> jit_mode(const Tensor& x, const Tensor& t, const CrossEntropyOptions& o, const Tensor& w) {
  auto f = jit::jit([o](const std::vector<Tensor>& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1], o)}; });
  Tensor leaf = x.detach().requires_grad_(true);
  Tensor loss = f({leaf, t})[0];
  objective(loss, w).backward();
  // The printed trace says which options it ran with.
  const std::string s = jit::last_traces(f).front().str();
  if (o.reduction == Reduction::Sum) CHECK(s.find("reduction='sum'") != std::string::npos);
  if (o.ignore_index != -100) CHECK(s.find("ignore_index=" + std::to_string(o.ignore_index)) != std::string::npos);
  return {loss.detach(), leaf.grad()};
}

std::pair<Tensor, Tensor> lazy_mode(const Tensor& x, const Tensor& t, const CrossEntropyOptions& o, const Tensor& w) {
  Tensor leaf = x.to(kLazy).requires_grad_(true);
  Tensor loss = cross_entropy(leaf, t.to(kLazy), o);
  objective(loss, w.to(kLazy)).backward();
  Tensor l = loss.detach().to(kCPU), g = leaf.grad().to(kCPU);
  lazy::mark_step();
  return {l, g};
}

void check_mode(const std::string& name, const Mode& mode) {
  manual_seed(17);
  Tensor x32 = Tensor::randn({kN, kC}) * 2.0;
  Tensor x64 = convert_element_type(x32, DType::f64);
  const std::vector<double> xv = x64.to_vector<double>();
  const std::vector<double> w = Tensor::randn({kN}, DType::f64).to_vector<double>();
  for (const CeCase& c : ce_cases()) {
    const std::string label = name + " " + c.label();
    INFO(label);
    const std::vector<int64_t> tv = ce_targets(c.options.ignore_index, kC);
    const Tensor t = Tensor::from_vector<int64_t>(tv);
    const std::vector<double> want = reference_ce(xv, kN, kC, tv, c.options);
    // f32: the loss within f32 rounding; f64: loss and gradient, the gradient
    // against finite differences of the reference.
    auto [l32, g32] = mode(x32, t, c.options, Tensor::from_vector<double>(w).to(DType::f32));
    CHECK(l32.dtype() == DType::f32);
    check_values(label + " f32 loss", l32.to_vector<double>(), want, 2e-6);
    auto [l64, g64] = mode(x64, t, c.options, Tensor::from_vector<double>(w));
    check_values(label + " f64 loss", l64.to_vector<double>(), want, 1e-12);
    check_values(label + " f64 gradient", g64.to_vector<double>(), finite_difference_grad(xv, tv, c.options, w), 1e-7);
    check_values(label + " f32 gradient", g32.to_vector<double>(), g64.to_vector<double>(), 2e-6);
  }
}

}  // namespace

TEST_CASE("cross_entropy options: eager (the fused kernel and autograd) against f64 loops") { check_mode("eager", eager_mode); }

TEST_CASE("cross_entropy options: jit (the decomposition and the grad pass) against f64 loops") { check_mode("jit", jit_mode); }

TEST_CASE("cross_entropy options: lazy device against f64 loops") { check_mode("lazy", lazy_mode); }

TEST_CASE("cross_entropy options: the shapes PyTorch gives and the edge cases") {
  Tensor x = Tensor::zeros({3, 4});
  Tensor t = Tensor::from_vector<int64_t>({1, -100, 2});
  CHECK(cross_entropy(x, t, {.reduction = Reduction::None}).sizes() == Shape{3});
  CHECK(cross_entropy(x, t).sizes() == Shape{});
  // Uniform logits: every counted row loses log(4); the ignored row is 0 and not counted.
  CHECK(cross_entropy(x, t).item<double>() == doctest::Approx(std::log(4.0)));
  CHECK(cross_entropy(x, t, {.reduction = Reduction::Sum}).item<double>() == doctest::Approx(2 * std::log(4.0)));
  CHECK(cross_entropy(x, t, {.reduction = Reduction::None}).to_vector<float>()[1] == 0.0f);
  // Every row ignored: the mean of nothing is NaN, as in PyTorch; the sum is 0.
  Tensor all = Tensor::full({3}, -100.0, DType::i64);
  CHECK(std::isnan(cross_entropy(x, all).item<double>()));
  CHECK(cross_entropy(x, all, {.reduction = Reduction::Sum}).item<double>() == 0.0);
  // Label smoothing 1: the loss is the mean over classes of -logp, log(4) for uniform logits.
  CHECK(cross_entropy(x, t, {.label_smoothing = 1.0}).item<double>() == doctest::Approx(std::log(4.0)));
  // Names as PyTorch spells them.
  CHECK(reduction_from_string("sum") == Reduction::Sum);
  CHECK(std::string(reduction_name(Reduction::None)) == "none");
}

TEST_CASE("cross_entropy options: bad options and targets are errors naming the op") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(cross_entropy(x, Tensor::from_vector<int64_t>({0, 1}), {.label_smoothing = 1.5}),
                       doctest::Contains("cross_entropy: label_smoothing must lie in [0, 1], got 1.5"), volt::Error);
  CHECK_THROWS_WITH_AS(reduction_from_string("avg"),
                       doctest::Contains("cross_entropy: unknown reduction 'avg'; expected 'none', 'mean' or 'sum'"),
                       volt::Error);
  // ignore_index is skipped; any other value out of range is still an error, in every mode.
  const char* message = "target values must lie in [0, 3), got [0, 5]";
  Tensor bad = Tensor::from_vector<int64_t>({5, -1, 0});
  Tensor x3 = Tensor::zeros({3, 3});
  CHECK_THROWS_WITH_AS(cross_entropy(x3, bad, {.ignore_index = -1}), doctest::Contains(message), volt::Error);
  auto f = jit::jit([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(in[0], in[1], {.ignore_index = -1})};
  });
  CHECK_THROWS_WITH_AS(f({x3, bad}), doctest::Contains(message), volt::Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x3.to(kLazy), bad.to(kLazy), {.ignore_index = -1}).item<float>(),
                       doctest::Contains(message), volt::Error);
  lazy::mark_step();
  CHECK(cross_entropy(x3, Tensor::from_vector<int64_t>({2, -1, 0}), {.ignore_index = -1}).item<double>() ==
        doctest::Approx(std::log(3.0)));
}

TEST_CASE("nll_loss options: reduction and ignore_index on any input, as PyTorch's nll_loss") {
  // nll_loss picks -input[i, t_i]; its input need not be log-probabilities.
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}).reshape({3, 3});
  Tensor t = Tensor::from_vector<int64_t>({2, 0, 1});
  CHECK(nll_loss(x, t).item<double>() == doctest::Approx(-(3 + 4 + 8) / 3.0));
  CHECK(nll_loss(x, t, {}, Reduction::Sum).item<double>() == doctest::Approx(-15.0));
  CHECK(nll_loss(x, t, {}, Reduction::None).to_vector<float>() == std::vector<float>{-3, -4, -8});
  // ignore_index 0 is a real class here: the second row is skipped and not counted.
  CHECK(nll_loss(x, t, {}, Reduction::Mean, 0).item<double>() == doctest::Approx(-(3 + 8) / 2.0));
  CHECK(nll_loss(x, t, {}, Reduction::None, 0).to_vector<float>() == std::vector<float>{-3, 0, -8});
  namespace F = nn::functional;
  CHECK(F::nll_loss(x, t, {}, Reduction::Sum, 1).item<double>() == doctest::Approx(-7.0));
  // The gradient: -1 at the picked element of each counted row, over the count.
  Tensor leaf = x.detach().requires_grad_(true);
  nll_loss(leaf, t, {}, Reduction::Mean, 0).backward();
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>{0, 0, -0.5f, 0, 0, 0, 0, -0.5f, 0});
}

TEST_CASE("cross_entropy options: nn::CrossEntropyLoss and nn::functional pass them on") {
  manual_seed(4);
  Tensor x = Tensor::randn({4, 3});
  Tensor t = Tensor::from_vector<int64_t>({0, 2, -1, 1});
  const CrossEntropyOptions o{.reduction = Reduction::Sum, .ignore_index = -1, .label_smoothing = 0.1};
  const double want = reference_ce(x.to_vector<double>(), 4, 3, t.to_vector<int64_t>(), o)[0];
  nn::CrossEntropyLoss loss_fn(o);
  CHECK(loss_fn(x, t).item<double>() == doctest::Approx(want).epsilon(1e-6));
  CHECK(nn::functional::cross_entropy(x, t, o).item<double>() == doctest::Approx(want).epsilon(1e-6));
}
