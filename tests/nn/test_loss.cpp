// Cross-entropy against a hand computation in double loops, value and gradient.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/functional.h"
#include "nn/loss.h"
#include "tensor/random.h"

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
