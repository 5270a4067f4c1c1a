// Linear: PyTorch's initialisation (bounds and draw order) and the forward values.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/nn/linear.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

TEST_CASE("Linear weight and bias lie in U(-1/sqrt(in), 1/sqrt(in))") {
  manual_seed(0);
  nn::Linear fc(100, 300);
  CHECK(fc.weight().sizes() == Shape{300, 100});
  CHECK(fc.bias().sizes() == Shape{300});
  const double bound = 1.0 / std::sqrt(100.0);
  for (const Tensor& p : {fc.weight(), fc.bias()}) {
    auto v = p.to_vector<float>();
    double lo = 1e9, hi = -1e9, sum = 0;
    for (float x : v) {
      lo = std::min(lo, double(x));
      hi = std::max(hi, double(x));
      sum += x;
    }
    CHECK(lo >= -bound);
    CHECK(hi < bound);
    // Spread over the whole interval, centred on zero.
    CHECK(hi > 0.97 * bound);
    CHECK(lo < -0.97 * bound);
    CHECK(std::abs(sum / v.size()) < 0.1 * bound);
  }
}

TEST_CASE("Linear draws the weight first, then the bias, from the global generator") {
  manual_seed(7);
  nn::Linear fc(5, 3);
  manual_seed(7);
  auto uw = Tensor::rand({3, 5}).to_vector<float>();
  auto ub = Tensor::rand({3}).to_vector<float>();
  const double bound = 1.0 / std::sqrt(5.0);
  auto w = fc.weight().to_vector<float>();
  auto b = fc.bias().to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i) CHECK(w[i] == doctest::Approx(-bound + 2 * bound * uw[i]));
  for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == doctest::Approx(-bound + 2 * bound * ub[i]));

  manual_seed(7);
  nn::Linear again(5, 3);
  CHECK(again.weight().to_vector<float>() == w);
  CHECK(again.bias().to_vector<float>() == b);
}

TEST_CASE("Linear forward is x W^T + b") {
  manual_seed(1);
  nn::Linear fc(4, 3);
  Tensor x = Tensor::randn({2, 4});
  Tensor y = fc(x);
  REQUIRE(y.sizes() == Shape{2, 3});
  auto xv = x.to_vector<float>(), wv = fc.weight().to_vector<float>(),
       bv = fc.bias().to_vector<float>(), yv = y.to_vector<float>();
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 3; ++o) {
      double want = bv[o];
      for (int k = 0; k < 4; ++k) want += double(xv[i * 4 + k]) * wv[o * 4 + k];
      CHECK(yv[i * 3 + o] == doctest::Approx(want).epsilon(1e-5));
    }
  // Leading dims pass through: (2, 5, 4) -> (2, 5, 3)
  CHECK(fc(Tensor::ones({2, 5, 4})).sizes() == Shape{2, 5, 3});
}

TEST_CASE("Linear without bias") {
  nn::Linear fc(4, 3, false);
  CHECK(!fc.bias().defined());
  CHECK(fc.named_parameters().size() == 1);
  CHECK(fc.repr() == "Linear(in_features=4, out_features=3, bias=False)");
  Tensor y = fc(Tensor::zeros({2, 4}));
  for (float v : y.to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("Linear rejects bad sizes and inputs") {
  CHECK_THROWS_WITH_AS(nn::Linear(0, 3), doctest::Contains("in_features=0"), volt::Error);
  nn::Linear fc(4, 3);
  CHECK_THROWS_AS(fc(Tensor::ones({2, 5})), volt::Error);
}
