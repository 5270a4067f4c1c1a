// topk and multinomial (tensor/sampling.h) against references written here:
// topk against a full sort of each row (PyTorch's order: descending, NaN the
// largest, ties to the lower index); multinomial's draws against the
// probabilities they come from (frequencies over many draws), and PyTorch's
// documented rules for weights that are not normalised, zero, or too few.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/sampling.h>

#include "error_of.h"

using namespace volt;

namespace {

// The k first positions of a stable sort of one row: the reference order.
std::vector<int64_t> sorted_positions(const std::vector<double>& row, int64_t k, bool largest) {
  std::vector<int64_t> at(row.size());
  std::iota(at.begin(), at.end(), int64_t{0});
  std::stable_sort(at.begin(), at.end(), [&](int64_t a, int64_t b) {
    return largest ? row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)]
                   : row[static_cast<size_t>(a)] < row[static_cast<size_t>(b)];
  });
  at.resize(static_cast<size_t>(k));
  return at;
}

}  // namespace

TEST_CASE("topk: the k largest (or smallest) along a dim, in order, against a sort of each row") {
  manual_seed(3);
  // Tenths in [-0.5, 0.5]: many ties, resolved to the lower index.
  Tensor x = randint(-5, 6, {3, 7, 4}).to(DType::f32) / 10.0;
  const std::vector<double> v = x.to(DType::f64).to_vector<double>();
  for (bool largest : {true, false}) {
    auto [values, indices] = topk(x, 3, 1, largest);
    REQUIRE(values.sizes() == Shape{3, 3, 4});
    REQUIRE(indices.dtype() == DType::i64);
    const std::vector<float> got = values.to_vector<float>();
    const std::vector<int64_t> at = indices.to_vector<int64_t>();
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t c = 0; c < 4; ++c) {
        std::vector<double> row;
        for (int64_t j = 0; j < 7; ++j) row.push_back(v[static_cast<size_t>(a * 28 + j * 4 + c)]);
        const std::vector<int64_t> want = sorted_positions(row, 3, largest);
        for (int64_t j = 0; j < 3; ++j) {
          const size_t o = static_cast<size_t>(a * 12 + j * 4 + c);
          CHECK(at[o] == want[static_cast<size_t>(j)]);
          CHECK(got[o] == static_cast<float>(row[static_cast<size_t>(want[static_cast<size_t>(j)])]));
        }
      }
  }
  // The last dim by default; k = n sorts the whole row; k = 0 is empty.
  Tensor row = Tensor::from_vector<float>({0.5f, 2.f, -1.f, 2.f}, {1, 4});
  auto [all, all_at] = topk(row, 4);
  CHECK(all.to_vector<float>() == std::vector<float>{2.f, 2.f, 0.5f, -1.f});
  CHECK(all_at.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 0, 2});
  CHECK(std::get<0>(topk(row, 0)).sizes() == Shape{1, 0});
}

TEST_CASE("topk: NaN counts as the largest, -inf as the smallest") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>({1.f, nan, -inf, 3.f});
  auto [top, top_at] = topk(x, 2);
  CHECK(top_at.to_vector<int64_t>() == std::vector<int64_t>{1, 3});
  CHECK(std::isnan(top.to_vector<float>()[0]));
  auto [low, low_at] = topk(x, 2, 0, /*largest=*/false);
  CHECK(low_at.to_vector<int64_t>() == std::vector<int64_t>{2, 0});
  CHECK(low.to_vector<float>()[0] == -inf);
}

TEST_CASE("topk: the values carry the gradient to the chosen elements") {
  Tensor x = Tensor::from_vector<double>({0.1, 0.9, 0.5, 0.3, 0.7, 0.2}, {2, 3}).requires_grad_();
  auto [values, indices] = topk(x, 2, 1);
  CHECK(values.to_vector<double>() == std::vector<double>{0.9, 0.5, 0.7, 0.3});
  // d/dx of sum(values * w): w at each chosen element, 0 elsewhere.
  (values * Tensor::from_vector<double>({1.0, 2.0, 3.0, 4.0}, {2, 2})).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0.0, 1.0, 2.0, 4.0, 3.0, 0.0});
}

TEST_CASE("topk: bad arguments are errors naming topk") {
  Tensor x = zeros({2, 3});
  CHECK(testing::error_of([&] { topk(x, 4); }).find("topk") != std::string::npos);
  CHECK(testing::error_of([&] { topk(x, -1); }).find("k = -1") != std::string::npos);
  CHECK(testing::error_of([&] { topk(x, 1, 2); }).find("dim 2") != std::string::npos);
  CHECK(testing::error_of([&] { topk(Tensor::scalar_tensor(1.0, DType::f32), 1); }).find("0-d") != std::string::npos);
}

TEST_CASE("multinomial with replacement: frequencies follow the (unnormalised) weights") {
  manual_seed(11);
  // Weights summing to 2, not 1 (PyTorch normalises each row); a zero weight is never drawn.
  Tensor probs = Tensor::from_vector<float>({0.2f, 0.4f, 0.0f, 1.4f, 1.f, 1.f, 1.f, 1.f}, {2, 4});
  const int64_t n = 20000;
  Tensor draws = multinomial(probs, n, /*replacement=*/true);
  REQUIRE(draws.sizes() == Shape{2, n});
  REQUIRE(draws.dtype() == DType::i64);
  const std::vector<int64_t> d = draws.to_vector<int64_t>();
  const double want[2][4] = {{0.1, 0.2, 0.0, 0.7}, {0.25, 0.25, 0.25, 0.25}};
  for (int r = 0; r < 2; ++r) {
    std::vector<double> freq(4, 0.0);
    for (int64_t s = 0; s < n; ++s) freq[static_cast<size_t>(d[static_cast<size_t>(r * n + s)])] += 1.0 / n;
    // 4 standard deviations of a frequency from 20000 draws: at most 0.0142.
    for (int j = 0; j < 4; ++j) CHECK(std::abs(freq[static_cast<size_t>(j)] - want[r][j]) < 0.0142);
  }
  CHECK(std::count(d.begin(), d.begin() + n, 2) == 0);
  // The same seed, the same draws.
  manual_seed(11);
  CHECK(multinomial(probs, n, true).to_vector<int64_t>() == d);
}

TEST_CASE("multinomial without replacement: distinct categories, the first draw as the weights") {
  manual_seed(5);
  Tensor probs = Tensor::from_vector<double>({0.5, 0.3, 0.2, 0.0});
  // 3 draws from 3 non-zero weights: a permutation of {0, 1, 2}, never 3.
  std::vector<double> first(3, 0.0);
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    const std::vector<int64_t> d = multinomial(probs, 3).to_vector<int64_t>();
    CHECK(std::set<int64_t>(d.begin(), d.end()) == std::set<int64_t>{0, 1, 2});
    first[static_cast<size_t>(d[0])] += 1.0 / trials;
  }
  // 4 standard deviations of a frequency from 4000 trials: at most 0.032.
  CHECK(std::abs(first[0] - 0.5) < 0.032);
  CHECK(std::abs(first[1] - 0.3) < 0.032);
  CHECK(std::abs(first[2] - 0.2) < 0.032);
  CHECK(multinomial(probs, 1).sizes() == Shape{1});
}

TEST_CASE("multinomial: bad weights and counts are errors naming multinomial") {
  auto error = [](const Tensor& p, int64_t n, bool replacement) {
    return testing::error_of([&] { multinomial(p, n, replacement); });
  };
  CHECK(error(Tensor::from_vector<float>({0.5f, -0.1f}), 1, true).find("finite and >= 0") != std::string::npos);
  CHECK(error(Tensor::from_vector<float>({0.f, 0.f}), 1, true).find("sums to 0") != std::string::npos);
  CHECK(error(Tensor::from_vector<float>({0.5f, 0.5f}), 3, false).find("without replacement") != std::string::npos);
  CHECK(error(Tensor::from_vector<float>({0.5f, 0.f, 0.f}), 2, false).find("non-zero") != std::string::npos);
  CHECK(error(Tensor::from_vector<int64_t>({1, 2}), 1, true).find("floating") != std::string::npos);
  CHECK(error(zeros({2, 2, 2}), 1, true).find("1-D or 2-D") != std::string::npos);
  CHECK(error(Tensor::from_vector<float>({0.5f, 0.5f}), 0, true).find("multinomial") != std::string::npos);
}
