// Cross-entropy against a hand computation in double loops, value and gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <volt/autograd/node.h>
#include <volt/nn/functional.h>
#include <volt/nn/loss.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;
namespace F = volt::nn::functional;

namespace {

constexpr int N = 4, C = 5;

// -log softmax(x)[t], averaged over the rows, in double.
double hand_cross_entropy(const std::vector<float>& x, const std::vector<int64_t>& t) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    double mx = -1e300;
    for (int c = 0; c < C; ++c) mx = std::max(mx, double(x[i * C + c]));
    double s = 0;
    for (int c = 0; c < C; ++c) s += std::exp(double(x[i * C + c]) - mx);
    total += mx + std::log(s) - x[i * C + t[i]];
  }
  return total / N;
}

}  // namespace

TEST_CASE("cross_entropy matches a hand computation") {
  manual_seed(3);
  Tensor logits = Tensor::randn({N, C}) * 3.0;
  std::vector<int64_t> t{0, 4, 2, 2};
  Tensor target = Tensor::from_vector<int64_t>(t);
  const double want = hand_cross_entropy(logits.to_vector<float>(), t);

  nn::CrossEntropyLoss loss_fn;
  Tensor loss = loss_fn(logits, target);
  CHECK(loss.dim() == 0);
  CHECK(loss.item<double>() == doctest::Approx(want).epsilon(1e-6));
  CHECK(F::cross_entropy(logits, target).item<double>() == doctest::Approx(want).epsilon(1e-6));
  CHECK(F::nll_loss(F::log_softmax(logits, 1), target).item<double>() ==
        doctest::Approx(want).epsilon(1e-6));
  CHECK(loss_fn.repr() == "CrossEntropyLoss()");
}

TEST_CASE("cross_entropy is stable for large logits") {
  Tensor logits = Tensor::from_vector<float>({1000.f, 0.f, -1000.f, 0.f}, {2, 2});
  // Each row picks the class 1000 below the other: -log softmax = 1000 exactly.
  Tensor target = Tensor::from_vector<int64_t>({1, 0});
  double loss = F::cross_entropy(logits, target).item<double>();
  CHECK(std::isfinite(loss));
  CHECK(loss == doctest::Approx(1000.0).epsilon(1e-6));
}

TEST_CASE("cross_entropy gradient is (softmax - onehot) / N") {
  manual_seed(4);
  Tensor logits = Tensor::randn({N, C});
  logits.requires_grad_(true);
  std::vector<int64_t> t{1, 0, 3, 4};
  nn::CrossEntropyLoss()(logits, Tensor::from_vector<int64_t>(t)).backward();
  REQUIRE(logits.grad().defined());
  auto x = logits.to_vector<float>();
  auto g = logits.grad().to_vector<float>();
  for (int i = 0; i < N; ++i) {
    double s = 0;
    for (int c = 0; c < C; ++c) s += std::exp(double(x[i * C + c]));
    for (int c = 0; c < C; ++c) {
      double want = (std::exp(double(x[i * C + c])) / s - (c == t[i] ? 1.0 : 0.0)) / N;
      CHECK(g[i * C + c] == doctest::Approx(want).epsilon(1e-5));
    }
  }
}

TEST_CASE("CrossEntropyLoss checks its inputs") {
  nn::CrossEntropyLoss loss_fn;
  Tensor logits = Tensor::zeros({3, 4});
  CHECK_THROWS_WITH_AS(loss_fn(logits, Tensor::zeros({2}, DType::i64)),
                       doctest::Contains("expected target (3)"), volt::Error);
  CHECK_THROWS_WITH_AS(loss_fn(logits, Tensor::zeros({3})), doctest::Contains("integer dtype"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(loss_fn(Tensor::zeros({4}), Tensor::zeros({4}, DType::i64)),
                       doctest::Contains("expected logits (N, C)"), volt::Error);
}

// ---- the fused kernel eager mode runs for cross_entropy (tensor/cross_entropy.inc)

namespace {

// Mean over rows of log(sum exp x) - x[t], and its gradient g * (softmax - onehot) / n, in double.
struct Reference {
  double loss = 0;
  std::vector<double> grad;
};

Reference reference_cross_entropy(const Tensor& logits, const std::vector<int64_t>& t, double g) {
  const int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> x = logits.contiguous().to_vector<double>();
  Reference r;
  r.grad.resize(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - mx);
    r.loss += (mx + std::log(s) - x[i * c + t[i]]) / n;
    for (int64_t j = 0; j < c; ++j)
      r.grad[i * c + j] = g * (std::exp(x[i * c + j] - mx) / s - (j == t[i] ? 1.0 : 0.0)) / n;
  }
  return r;
}

double max_rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  return volt::testing::max_rel_diff(got, want, 1e-3);
}

}  // namespace

TEST_CASE("cross_entropy's fused kernel: value and gradient against f64 loops and the decomposition") {
  manual_seed(21);
  const int64_t n = 37, c = 13;
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 5 + 3) % c;
  for (DType dt : {DType::f32, DType::f64}) {
    for (bool transposed : {false, true}) {
      for (DType target_dtype : {DType::i64, DType::i32}) {
        const std::string label = std::string(dtype_name(dt)) + (transposed ? " transposed" : " contiguous") +
                                  " logits, " + dtype_name(target_dtype) + " target";
        INFO(label);
        Tensor x = transposed ? (Tensor::randn({c, n}, dt) * 4.0).t() : Tensor::randn({n, c}, dt) * 4.0;
        Tensor target = Tensor::from_vector<int64_t>(t).to(target_dtype);
        const double tol = dt == DType::f32 ? 2e-6 : 1e-12;
        Reference want = reference_cross_entropy(x, t, 1.0);

        Tensor leaf = x.detach().requires_grad_(true);
        Tensor loss = cross_entropy(leaf, target);
        // Eager autograd recorded the loss whole: one node, not the decomposition's twenty.
        REQUIRE(loss.impl()->grad_fn);
        CHECK(loss.impl()->grad_fn->name().find("cross_entropy") != std::string::npos);
        CHECK(loss.dtype() == dt);
        CHECK(loss.item<double>() == doctest::Approx(want.loss).epsilon(tol));
        loss.backward();
        CHECK(max_rel_diff(leaf.grad().to_vector<double>(), want.grad) < (dt == DType::f32 ? 1e-5 : 1e-12));

        // The composite's decomposition (what the jit and the lazy device run).
        Tensor decomposed = decompose(OpCall{OpId::cross_entropy, {x, target}, {}})[0];
        CHECK(decomposed.item<double>() == doctest::Approx(loss.item<double>()).epsilon(tol));

        // The backward op with a gradient other than 1, fused and decomposed.
        Tensor g = Tensor::full({}, 2.5, dt);
        Reference want_g = reference_cross_entropy(x, t, 2.5);
        Tensor fused_grad = cross_entropy_backward(g, x, target);
        Tensor decomposed_grad = decompose(OpCall{OpId::cross_entropy_backward, {g, x, target}, {}})[0];
        CHECK(fused_grad.sizes() == Shape{n, c});
        CHECK(max_rel_diff(fused_grad.to_vector<double>(), want_g.grad) < (dt == DType::f32 ? 1e-5 : 1e-12));
        CHECK(max_rel_diff(decomposed_grad.to_vector<double>(), want_g.grad) < (dt == DType::f32 ? 1e-5 : 1e-12));
      }
    }
  }
}

TEST_CASE("cross_entropy's fused kernel: NaN rows, bad targets and empty batches") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, NAN, 0, 1}, {2, 3});
  CHECK(std::isnan(cross_entropy(x, Tensor::from_vector<int64_t>({0, 1})).item<double>()));
  Tensor g = cross_entropy_backward(Tensor::full({}, 1.0), x, Tensor::from_vector<int64_t>({0, 1}));
  std::vector<float> gv = g.to_vector<float>();
  CHECK(std::isfinite(gv[0]));  // the first row is unaffected by the second's NaN
  CHECK(std::isnan(gv[3]));

  Tensor y = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(cross_entropy(y, Tensor::from_vector<int64_t>({-1, 2})),
                       doctest::Contains("cross_entropy: target values must lie in [0, 3), got [-1, 2]"), volt::Error);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(Tensor::full({}, 1.0), y, Tensor::from_vector<int64_t>({0, 3})),
                       doctest::Contains("cross_entropy_backward: target values must lie in [0, 3), got [0, 3]"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(Tensor::zeros({2}), y, Tensor::from_vector<int64_t>({0, 1})),
                       doctest::Contains("expected a gradient shaped like the loss, [], got"), volt::Error);
  // No rows: the mean of nothing, NaN as in PyTorch.
  CHECK(std::isnan(cross_entropy(Tensor::zeros({0, 3}), Tensor::zeros({0}, DType::i64)).item<double>()));
}
