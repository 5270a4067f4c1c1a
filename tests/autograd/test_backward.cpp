// Backward semantics: accumulation, no_grad, detach, retain_graph, errors.
#include <doctest/doctest.h>

#include <volt/autograd/grad_mode.h>
#include <volt/autograd/node.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {
Tensor leaf(const std::vector<double>& v, const Shape& s) {
  Tensor t = Tensor::from_vector<double>(v, s);
  t.requires_grad_();
  return t;
}
Tensor leaf(const std::vector<double>& v) { return leaf(v, {static_cast<int64_t>(v.size())}); }
}  // namespace

TEST_CASE("the gradient of a simple expression") {
  Tensor w = leaf({1, -2, 3});
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  CHECK(!w.grad().defined());
  Tensor loss = (w * w).sum();
  CHECK(loss.requires_grad());
  CHECK(!loss.is_leaf());
  loss.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, -4, 6});
  CHECK(w.grad().dtype() == DType::f64);
  CHECK(!w.grad().requires_grad());
}

TEST_CASE(".grad accumulates across backward calls") {
  Tensor x = leaf({1, 2});
  (x * x).sum().backward();
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2 + 3, 4 + 3});
  x.grad().zero_();
  (x * x).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
}

TEST_CASE("a value used twice gets the sum of both paths") {
  Tensor x = leaf({0.5, -1.5});
  Tensor a = x * 2.0;
  Tensor y = (a * a + a + exp(x)).sum();  // 4x^2 + 2x + e^x
  y.backward();
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(8 * 0.5 + 2 + std::exp(0.5)));
  CHECK(g[1] == doctest::Approx(8 * -1.5 + 2 + std::exp(-1.5)));
  // Intermediate results keep no gradient.
  CHECK(!a.grad().defined());
}

TEST_CASE("the gradient of a broadcast input is summed back to its shape") {
  Tensor x = leaf({1, 2, 3}, {3, 1});
  Tensor y = leaf({1, 10, 100, 1000}, {1, 4});
  (x * y).sum().backward();
  CHECK(x.grad().sizes() == Shape{3, 1});
  CHECK(y.grad().sizes() == Shape{1, 4});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1111, 1111, 1111});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{6, 6, 6, 6});
  // A zero-dim leaf and a lower-rank leaf.
  Tensor s = leaf({2}, {});
  Tensor b = leaf({1, 1});
  Tensor m = Tensor::ones({3, 2}, DType::f64);
  (m * s + b).sum().backward();
  CHECK(s.grad().dim() == 0);
  CHECK(s.grad().item<double>() == 6);
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("gradients keep each leaf's dtype") {
  Tensor x = Tensor::from_vector<float>({1, 2});
  x.requires_grad_();
  Tensor s = Tensor::scalar_tensor(3.0, DType::f64);
  s.requires_grad_();
  Tensor y = x * s;  // f32: a zero-dim f64 does not promote a dimensioned f32
  CHECK(y.dtype() == DType::f32);
  y.sum().backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(s.grad().dtype() == DType::f64);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3});
  CHECK(s.grad().item<double>() == 3);
  Tensor z = leaf({1.5});
  z.to(DType::f32).sum().backward();
  CHECK(z.grad().dtype() == DType::f64);
}

TEST_CASE("ties in maximum and amax share the gradient") {
  Tensor a = leaf({1, 2, 3});
  Tensor b = leaf({1, 5, 0});
  maximum(a, b).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0, 1});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5, 1, 0});
  Tensor c = leaf({1, 3, 3});
  amax(c).backward();
  CHECK(c.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5});
}

TEST_CASE("gradients flow through views into the right elements") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  (x.t().select(0, 1) * 10.0).sum().backward();  // column 1 of x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 10, 0, 0, 10, 0});
  Tensor y = leaf({1, 2, 3, 4}, {2, 2});
  y.reshape({4}).narrow(0, 1, 2).sum().backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("backward with an explicit gradient for a non-scalar output") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  y.backward(Tensor::from_vector<double>({1, 10, 100}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 20, 200});
  Tensor z = x * 2.0;
  CHECK_THROWS_WITH_AS(z.backward(Tensor::ones({2}, DType::f64)), doctest::Contains("does not match"), volt::Error);
}

TEST_CASE("backward on a leaf") {
  Tensor x = leaf({4}, {});
  x.backward();
  CHECK(x.grad().item<double>() == 1);
}

TEST_CASE("NoGradGuard records nothing and restores the mode") {
  Tensor x = leaf({1, 2});
  CHECK(grad_enabled());
  {
    NoGradGuard ng;
    CHECK(!grad_enabled());
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.is_leaf());
    {
      NoGrad inner;  // the autograd-facing name
      CHECK(!grad_enabled());
    }
    CHECK(!grad_enabled());
    CHECK_THROWS_AS(y.sum().backward(), volt::Error);
    // In-place updates of a leaf are allowed here (an optimizer step).
    x.sub_(Tensor::from_vector<double>({0.5, 0.5}));
  }
  CHECK(grad_enabled());
  CHECK(x.to_vector<double>() == std::vector<double>{0.5, 1.5});
  CHECK(x.is_leaf());
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("detach shares storage and cuts the graph") {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0;
  Tensor d = y.detach();
  CHECK(!d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.impl()->storage == y.impl()->storage);
  CHECK(d.to_vector<double>() == std::vector<double>{3, 6});
  Tensor z = (d * x).sum();  // only the x factor is seen
  z.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 6});
  CHECK(!(d * 2.0).requires_grad());
}

TEST_CASE("non-differentiable results do not require grad") {
  Tensor x = leaf({1, 3, 2});
  CHECK(!(x > 1.5).requires_grad());
  CHECK(!argmax(x, 0).requires_grad());
  CHECK(!x.to(DType::i64).requires_grad());
  CHECK(!Tensor::zeros({2}).requires_grad());
  Tensor w = where(x > 1.5, x, 0.0);
  CHECK(w.requires_grad());
  w.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1});
}

TEST_CASE("backward errors") {
  Tensor x = leaf({1, 2, 3});
  SUBCASE("a non-scalar output without a gradient") {
    CHECK_THROWS_WITH_AS((x * 2.0).backward(),
                         doctest::Contains("grad can be implicitly created only for scalar outputs"), volt::Error);
  }
  SUBCASE("a tensor that needs no grad") {
    CHECK_THROWS_WITH_AS(Tensor::ones({}).backward(), doctest::Contains("does not require grad"), volt::Error);
    CHECK_THROWS_WITH_AS(x.detach().sum().backward(), doctest::Contains("does not require grad"), volt::Error);
  }
  SUBCASE("twice through the same graph") {
    Tensor y = (x * x).sum();
    y.backward();
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward through the graph a second time"), volt::Error);
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph=true"), volt::Error);
  }
  SUBCASE("twice with retain_graph") {
    Tensor y = (x * x).sum();
    y.backward(Tensor(), true);
    y.backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 8, 12});
  }
  SUBCASE("in place on a leaf that requires grad") {
    CHECK_THROWS_WITH_AS(x.add_(1.0), doctest::Contains("a leaf tensor that requires grad cannot be modified in place"),
                         volt::Error);
    CHECK_THROWS_AS(x.mul_(2.0), volt::Error);
    CHECK_THROWS_AS(x.fill_(0.0), volt::Error);
    CHECK_THROWS_AS(x.zero_(), volt::Error);
    CHECK_THROWS_AS(x.copy_(Tensor::zeros({3}, DType::f64)), volt::Error);
    CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3});
  }
}

TEST_CASE("dropout's gradient uses the forward mask") {
  Tensor x = leaf(std::vector<double>(1000, 1.0));
  manual_seed(77);
  Tensor y = dropout(x, 0.25, true);
  y.sum().backward();
  auto yv = y.to_vector<double>(), gv = x.grad().to_vector<double>();
  int kept = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    CHECK(gv[i] == yv[i]);  // x is all ones, so y == mask / (1 - p) == grad
    CHECK((yv[i] == 0 || yv[i] == doctest::Approx(1 / 0.75)));
    kept += yv[i] != 0;
  }
  CHECK(kept > 700);
  CHECK(kept < 800);
}

TEST_CASE("a long chain backpropagates without recursion") {
  Tensor x = leaf({1.0}, {});
  Tensor y = x;
  for (int i = 0; i < 5000; ++i) y = y * 1.0001;
  y.backward();
  CHECK(x.grad().item<double>() == doctest::Approx(std::pow(1.0001, 5000)));
}

TEST_CASE("backward: a leaf's .grad never aliases a tensor someone else holds") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3});
  x.requires_grad_();
  // The gradient the caller passes reaches x unchanged through `x + 0`'s VJP:
  // x.grad must be a copy, or writing into g would change it.
  Tensor y = add(x, 0.0);
  Tensor g = Tensor::from_vector<float>({1, 1, 1});
  y.backward(g, /*retain_graph=*/true);
  g.fill_(100.0);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 1, 1});
  // A second backward accumulates in place into x's own gradient.
  y.backward(Tensor::from_vector<float>({1, 2, 3}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 3, 4});
  CHECK(g.to_vector<float>() == std::vector<float>{100, 100, 100});

  // A gradient computed inside backward (x * w) and a leaf passed directly.
  Tensor w = Tensor::from_vector<float>({2, 2, 2});
  w.requires_grad_();
  Tensor z = mul(x, w).sum();
  z.backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK_FALSE(w.grad().is_same(x));
  Tensor l = Tensor::from_vector<float>({5});
  l.requires_grad_();
  Tensor seed = Tensor::from_vector<float>({7});
  l.backward(seed);
  seed.fill_(0.0);
  CHECK(l.grad().to_vector<float>() == std::vector<float>{7});
}
