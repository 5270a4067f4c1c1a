// masked_fill, tril/triu, clamp, max/min with indices, allclose and equal:
// values against plain loops, f64 gradients, every mode against eager, errors.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/modes.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::unravel;

TEST_CASE("tril and triu keep the triangle j - i <= k (>= k), on batches too") {
  manual_seed(9);
  Tensor x = Tensor::randn({2, 3, 5});
  auto xv = x.to_vector<double>();
  for (int64_t k : {-2, -1, 0, 1, 3, 7}) {
    auto lo = tril(x, k).to_vector<double>(), hi = x.triu(k).to_vector<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.sizes());
      const int64_t off = idx[2] - idx[1];
      CHECK(lo[i] == (off <= k ? xv[i] : 0.0));
      CHECK(hi[i] == (off >= k ? xv[i] : 0.0));
    }
  }
  CHECK(tril(Tensor::ones({3, 3}, DType::i64)).dtype() == DType::i64);
  CHECK(tril(Tensor::ones({3, 3}, DType::i64)).sum().item<int64_t>() == 6);
}

TEST_CASE("masked_fill puts the value where the mask is true, broadcasting the mask") {
  Tensor x = Tensor::arange(6, DType::f32).reshape({2, 3});
  Tensor causal = tril(Tensor::ones({2, 3}, DType::b8)) == 0;
  Tensor m = x.masked_fill(causal, -INFINITY);
  auto v = m.to_vector<float>();
  CHECK(v[0] == 0);
  CHECK(std::isinf(v[1]));
  CHECK(std::isinf(v[2]));
  CHECK(v[3] == 3);
  CHECK(v[4] == 4);
  CHECK(std::isinf(v[5]));
  Tensor row = Tensor::from_vector<bool>({true, false, true});
  CHECK(masked_fill(x, row, 7).to_vector<float>() == std::vector<float>{7, 1, 7, 7, 4, 7});
  Tensor xi = Tensor::arange(3);
  CHECK(masked_fill(xi, row, 2.7).dtype() == DType::i64);  // keeps the input's dtype
}

TEST_CASE("clamp bounds below, above or both") {
  Tensor x = Tensor::from_vector<double>({-3, -1, 0, 0.5, 2, 9});
  CHECK(clamp(x, -1.0, 2.0).to_vector<double>() == std::vector<double>{-1, -1, 0, 0.5, 2, 2});
  CHECK(clamp(x, 0.0).to_vector<double>() == std::vector<double>{0, 0, 0, 0.5, 2, 9});
  CHECK(x.clamp(std::nullopt, 1.0).to_vector<double>() == std::vector<double>{-3, -1, 0, 0.5, 1, 1});
  CHECK(clamp(Tensor::arange(5), 1, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2, 3, 3});
  CHECK(std::isnan(clamp(Tensor::from_vector<float>({NAN}), 0.0, 1.0).item<float>()));
  // The gradient passes inside [min, max] only.
  Tensor l = x.clone().requires_grad_();
  clamp(l, -1.0, 2.0).sum().backward();
  CHECK(l.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 1, 1, 0});
}

TEST_CASE("max and min along a dim give values and indices, keepdim or not") {
  Tensor x = Tensor::from_vector<float>({3, 9, 1, 4, -2, 8, 7, 0}, {2, 4});
  auto [v, i] = max(x, 1);
  CHECK(v.to_vector<float>() == std::vector<float>{9, 8});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  auto [v0, i0] = x.max(0, true);
  CHECK(v0.sizes() == Shape{1, 4});
  CHECK(v0.to_vector<float>() == std::vector<float>{3, 9, 7, 4});
  CHECK(i0.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0});
  auto [mn, mi] = x.min(-1);
  CHECK(mn.to_vector<float>() == std::vector<float>{1, -2});
  CHECK(mi.to_vector<int64_t>() == std::vector<int64_t>{2, 0});
  CHECK(max(x).item<float>() == 9);
  CHECK(min(x).item<float>() == -2);
  CHECK(x.argmin(1, true).to_vector<int64_t>() == std::vector<int64_t>{2, 0});
  CHECK(argmax(x, 0, true).sizes() == Shape{1, 4});
}

TEST_CASE("allclose and equal") {
  Tensor a = Tensor::from_vector<double>({1, 2, INFINITY, 0});
  CHECK(allclose(a, a + 1e-9));
  CHECK_FALSE(allclose(a, a + 1e-3));
  CHECK(allclose(a, a + 1e-3, 1e-2, 1e-2));
  CHECK(a.allclose(a));  // equal infinities are close
  Tensor n = Tensor::from_vector<double>({NAN, 1});
  CHECK_FALSE(allclose(n, n));
  CHECK(allclose(n, n, 1e-5, 1e-8, true));
  CHECK(allclose(Tensor::ones({2, 3}), Tensor::ones({3})));  // broadcast
  CHECK(equal(Tensor::arange(4), Tensor::arange(4)));
  CHECK_FALSE(equal(Tensor::arange(4), Tensor::arange(4).reshape({2, 2})));
  CHECK_FALSE(Tensor::arange(4).equal(Tensor::from_vector<int64_t>({0, 1, 2, 4})));
  CHECK(equal(Tensor::arange(4, DType::f32), Tensor::arange(4)));
}

TEST_CASE("masks, clamp and max: f64 gradients by finite differences") {
  manual_seed(10);
  Tensor x = Tensor::randn({3, 4}, DType::f64);
  Tensor mask = Tensor::from_vector<bool>({true, false, false, true});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return tril(a[0], 1) + triu(a[0] * 2.0, -1); }, {x}).ok);
  CHECK(autograd::gradcheck([mask](const std::vector<Tensor>& a) { return masked_fill(a[0], mask, 3.0); }, {x}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return clamp(a[0], -0.5, 0.5); }, {x}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return std::get<0>(max(a[0], 1, true)) * a[0]; }, {x}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return std::get<0>(min(a[0], 0)); }, {x}).ok);
}

TEST_CASE("masks, clamp and max: the jit, compile_step and the lazy device equal eager") {
  manual_seed(11);
  Tensor x = Tensor::randn({2, 4, 4});
  check_modes([](const std::vector<Tensor>& a) { return tril(a[0]); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return triu(a[0], 1); }, {x});
  check_modes(
      [](const std::vector<Tensor>& a) {
        Tensor causal = tril(Tensor::ones({4, 4}, DType::b8, a[0].device())) == 0;
        return softmax(masked_fill(a[0], causal, -INFINITY), -1);
      },
      {x});
  check_modes([](const std::vector<Tensor>& a) { return clamp(a[0], -0.5, 0.7); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return std::get<0>(max(a[0], 2)); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return std::get<1>(min(a[0], 1)); }, {x});
}

TEST_CASE("masks and clamp: bad input names the op") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(tril(Tensor::zeros({3})), doctest::Contains("tril: expected a tensor of at least 2 dims"), Error);
  CHECK_THROWS_WITH_AS(x.masked_fill(Tensor::zeros({2, 3}), 1.0), doctest::Contains("masked_fill: expected a bool mask"),
                       Error);
  CHECK_THROWS_WITH_AS(x.masked_fill(Tensor::zeros({4, 2, 3}, DType::b8), 1.0),
                       doctest::Contains("masked_fill: mask of shape [4, 2, 3] does not broadcast"), Error);
  CHECK_THROWS_WITH_AS(clamp(x, std::nullopt), doctest::Contains("clamp: at least one of min and max"), Error);
  CHECK_THROWS_WITH_AS(max(x, 2), doctest::Contains("max: dim 2 out of range"), Error);
}
