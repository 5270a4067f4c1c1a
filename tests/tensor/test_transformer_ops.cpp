// gelu (exact and tanh), erf, layer_norm, embedding and softmax on any dim:
// values against plain loops, f64 gradients by finite differences, every mode
// against eager, and the errors that name the op.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/modes.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::max_abs_diff;
using volt::testing::unravel;

TEST_CASE("erf and gelu (exact and tanh) match their formulas") {
  std::vector<double> xs{-4, -1.5, -0.3, 0, 0.2, 1, 2.5, 6};
  Tensor x = Tensor::from_vector<double>(xs);
  auto e = erf(x).to_vector<double>();
  auto g = gelu(x).to_vector<double>();
  auto t = gelu(x, "tanh").to_vector<double>();
  auto gf = gelu(x.to(DType::f32)).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    CHECK(e[i] == doctest::Approx(std::erf(v)).epsilon(1e-14));
    CHECK(g[i] == doctest::Approx(0.5 * v * std::erfc(-v / std::sqrt(2.0))).epsilon(1e-12));
    const double inner = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    CHECK(t[i] == doctest::Approx(0.5 * v * (1 + std::tanh(inner))).epsilon(1e-12));
    CHECK(gf[i] == doctest::Approx(g[i]).epsilon(1e-6));
  }
  // erf of integers computes in floats, as exp does.
  CHECK(erf(Tensor::arange(3)).dtype() == DType::f32);
}

TEST_CASE("layer_norm over the last k dims, with and without weight and bias") {
  manual_seed(4);
  Tensor x = Tensor::randn({3, 2, 4}, DType::f64);
  Tensor w = Tensor::randn({2, 4}, DType::f64), b = Tensor::randn({2, 4}, DType::f64);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (int k : {1, 2}) {
    const int64_t group = k == 1 ? 4 : 8;
    Tensor wk = k == 1 ? w.select(0, 0) : w, bk = k == 1 ? b.select(0, 0) : b;
    Shape ns = k == 1 ? Shape{4} : Shape{2, 4};
    auto plain = layer_norm(x, ns, Tensor(), Tensor(), 1e-5).to_vector<double>();
    auto affine = layer_norm(x, ns, wk, bk, 1e-5).to_vector<double>();
    auto only_w = layer_norm(x, ns, wk).to_vector<double>();
    for (size_t g0 = 0; g0 < xv.size(); g0 += group) {
      double m = 0, v = 0;
      for (int64_t i = 0; i < group; ++i) m += xv[g0 + i];
      m /= group;
      for (int64_t i = 0; i < group; ++i) v += (xv[g0 + i] - m) * (xv[g0 + i] - m);
      v /= group;
      for (int64_t i = 0; i < group; ++i) {
        const double n = (xv[g0 + i] - m) / std::sqrt(v + 1e-5);
        CHECK(plain[g0 + i] == doctest::Approx(n).epsilon(1e-12));
        CHECK(affine[g0 + i] == doctest::Approx(n * wv[i] + bv[i]).epsilon(1e-12));
        CHECK(only_w[g0 + i] == doctest::Approx(n * wv[i]).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("embedding picks rows; its weight gradient adds repeated rows") {
  Tensor w = Tensor::arange(12, DType::f32).reshape({4, 3});
  Tensor idx = Tensor::from_vector<int64_t>({3, 0, 3, 1, 1, 1}, {2, 3});
  Tensor y = embedding(w, idx);
  CHECK(y.sizes() == Shape{2, 3, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5, 3, 4, 5, 3, 4, 5});
  Tensor wl = w.clone().requires_grad_();
  manual_seed(5);
  Tensor g = Tensor::randn({2, 3, 3});
  sum(embedding(wl, idx) * g).backward();
  // The scatter-add, by a loop: row idx[i] of the gradient gets g[i].
  std::vector<double> want(12, 0.0);
  auto iv = idx.to_vector<int64_t>();
  auto gv = g.to_vector<double>();
  for (size_t i = 0; i < iv.size(); ++i)
    for (int j = 0; j < 3; ++j) want[iv[i] * 3 + j] += gv[i * 3 + j];
  auto got = wl.grad().to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  // i32 indices work as well.
  CHECK(embedding(w, idx.to(DType::i32)).to_vector<float>() == y.to_vector<float>());
}

TEST_CASE("softmax and log_softmax on every dim are stable and sum to one") {
  manual_seed(6);
  Tensor x = Tensor::randn({2, 3, 4}, DType::f64) * 5.0 + 800.0;  // exp(800) overflows unshifted
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    auto s = softmax(x, dim).to_vector<double>();
    auto ls = x.log_softmax(dim).to_vector<double>();
    auto xv = x.to_vector<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.sizes());
      double mx = -INFINITY;
      for (int64_t j = 0; j < x.sizes()[d]; ++j) {
        idx[d] = j;
        mx = std::max(mx, xv[volt::testing::ravel(idx, x.sizes())]);
      }
      double z = 0;
      for (int64_t j = 0; j < x.sizes()[d]; ++j) {
        idx[d] = j;
        z += std::exp(xv[volt::testing::ravel(idx, x.sizes())] - mx);
      }
      CHECK(std::isfinite(s[i]));
      CHECK(s[i] == doctest::Approx(std::exp(xv[i] - mx) / z).epsilon(1e-12));
      CHECK(ls[i] == doctest::Approx(xv[i] - mx - std::log(z)).epsilon(1e-12));
    }
  }
}

TEST_CASE("gelu, layer_norm, embedding, softmax: f64 gradients by finite differences") {
  manual_seed(7);
  Tensor x = Tensor::randn({3, 4}, DType::f64);
  Tensor w = Tensor::randn({4}, DType::f64), b = Tensor::randn({4}, DType::f64);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return erf(a[0]); }, {x}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return gelu(a[0]); }, {x}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return gelu(a[0], "tanh"); }, {x}).ok);
  CHECK(autograd::gradcheck(
            [](const std::vector<Tensor>& a) { return layer_norm(a[0], {4}, a[1], a[2]); }, {x, w, b})
            .ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return layer_norm(a[0], {3, 4}); }, {x}).ok);
  Tensor idx = Tensor::from_vector<int64_t>({2, 0, 2, 1, 3});
  CHECK(autograd::gradcheck([idx](const std::vector<Tensor>& a) { return embedding(a[0], idx); }, {x.t()}).ok);
  for (int64_t d : {0, 1})
    CHECK(autograd::gradcheck(
              [d](const std::vector<Tensor>& a) { return softmax(a[0], d) + log_softmax(a[0], d); }, {x})
              .ok);
}

TEST_CASE("gelu, layer_norm, embedding, softmax: the jit, compile_step and the lazy device equal eager") {
  manual_seed(8);
  Tensor x = Tensor::randn({2, 3, 4});
  Tensor w = Tensor::randn({4}), b = Tensor::randn({4});
  check_modes([](const std::vector<Tensor>& a) { return gelu(a[0]); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return gelu(a[0], "tanh"); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return layer_norm(a[0], {4}, a[1], a[2]); }, {x, w, b});
  check_modes([](const std::vector<Tensor>& a) { return layer_norm(a[0], {3, 4}); }, {x});
  Tensor table = Tensor::randn({5, 4});
  Tensor idx = Tensor::from_vector<int64_t>({4, 0, 4, 2, 1, 1}, {2, 3});
  check_modes([](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); }, {table, idx});
  check_modes([](const std::vector<Tensor>& a) { return softmax(a[0], 1); }, {x});
  check_modes([](const std::vector<Tensor>& a) { return log_softmax(a[0], 0); }, {x});
}

TEST_CASE("layer_norm, embedding and gelu: bad input names the op") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(layer_norm(x, {4}), doctest::Contains("layer_norm: expected input with shape [*, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, Tensor::ones({4})),
                       doctest::Contains("layer_norm: weight of shape [4] does not match normalized_shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {2, 2, 3}), doctest::Contains("layer_norm"), Error);
  Tensor w = Tensor::zeros({4, 2});
  CHECK_THROWS_WITH_AS(embedding(w, Tensor::from_vector<int64_t>({0, 4})),
                       doctest::Contains("embedding: index out of range: indices must lie in [0, 4), got values in [0, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(w, Tensor::from_vector<int64_t>({-1})), doctest::Contains("embedding: index out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(w, Tensor::zeros({2})), doctest::Contains("embedding: expected integer indices"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(Tensor::zeros({4}), Tensor::zeros({2}, DType::i64)),
                       doctest::Contains("embedding: expected a weight (num_embeddings, dim)"), Error);
  CHECK_THROWS_WITH_AS(gelu(x, "fast"), doctest::Contains("gelu: approximate must be"), Error);
}
