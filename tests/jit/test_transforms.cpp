// The jit's function transforms grad, value_and_grad and vjp, checked against
// eager autograd (the tape, an independent path from the traced VJPs).
#include <doctest/doctest.h>

#include <cmath>

#include <volt/autograd/grad_mode.h>
#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

// Two outputs, so that the cotangents weigh them differently.
std::vector<Tensor> two_outputs(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  Tensor h = volt::tanh(volt::matmul(x, w));
  return {h, mul(x, x).sum({1})};
}

// Eager reference: outputs, then the gradients of x and w for these cotangents.
std::vector<Tensor> eager_vjp(const Tensor& x0, const Tensor& w0, const std::vector<Tensor>& cts) {
  Tensor x = x0.clone(), w = w0.clone();
  x.requires_grad_();
  w.requires_grad_();
  std::vector<Tensor> out = two_outputs({x, w});
  // sum_k <ct_k, out_k> has exactly the vector-Jacobian product as its gradient.
  Tensor total = mul(out[0], cts[0]).sum() + mul(out[1], cts[1]).sum();
  total.backward();
  return {out[0].detach(), out[1].detach(), x.grad(), w.grad()};
}

}  // namespace

TEST_CASE("jit vjp: outputs and vector-Jacobian products match eager autograd") {
  manual_seed(11);
  Tensor x = Tensor::randn({4, 3}), w = Tensor::randn({3, 5});
  std::vector<Tensor> cts = {Tensor::randn({4, 5}), Tensor::randn({4})};
  auto v = jit::vjp(jit::jit(two_outputs, {"x", "w"}));
  std::vector<Tensor> got = v({x, w}, cts);
  std::vector<Tensor> want = eager_vjp(x, w, cts);
  REQUIRE(got.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(max_abs_diff(got[i], want[i]) < 1e-5);

  // New cotangents of the same shapes reuse the program.
  cts = {Tensor::randn({4, 5}), Tensor::randn({4})};
  got = v({x, w}, cts);
  want = eager_vjp(x, w, cts);
  for (size_t i = 0; i < 4; ++i) CHECK(max_abs_diff(got[i], want[i]) < 1e-5);
  CHECK(jit::cache_hits(v) == 1);
  CHECK(jit::cache_misses(v) == 1);

  // The cotangents are named inputs of the printed program.
  std::string s = jit::last_traces(v).back().str();
  CHECK(s.find("def computation(x, w, cotangent_0, cotangent_1):") != std::string::npos);
}

TEST_CASE("jit grad and value_and_grad are vjp with cotangents of ones") {
  manual_seed(12);
  Tensor x = Tensor::randn({2, 3}), w = Tensor::randn({3, 4});
  std::vector<Tensor> ones = {Tensor::ones({2, 4}), Tensor::ones({2})};
  std::vector<Tensor> want = eager_vjp(x, w, ones);
  auto f = jit::jit(two_outputs, {"x", "w"});
  std::vector<Tensor> g = jit::grad(f)({x, w});
  REQUIRE(g.size() == 2);
  CHECK(max_abs_diff(g[0], want[2]) < 1e-5);
  CHECK(max_abs_diff(g[1], want[3]) < 1e-5);
  std::vector<Tensor> vg = jit::value_and_grad(f)({x, w});
  REQUIRE(vg.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(max_abs_diff(vg[i], want[i]) < 1e-5);
}

TEST_CASE("jit vjp: wrong cotangents and wrong calls are clear errors") {
  Tensor x = Tensor::ones({2, 3}), w = Tensor::ones({3, 4});
  auto v = jit::vjp(jit::jit(two_outputs));
  CHECK_THROWS_WITH_AS(v({x, w}, {Tensor::ones({2, 4})}),
                       doctest::Contains("vjp: the function has 2 outputs, so it needs as many cotangents, got 1"),
                       Error);
  CHECK_THROWS_WITH_AS(v({x, w}, {Tensor::ones({4, 2}), Tensor::ones({2})}),
                       doctest::Contains("vjp: cotangent 0 is cpu f32[4, 2] but output 0 is cpu f32[2, 4]"), Error);
  CHECK_THROWS_WITH_AS(v(std::vector<Tensor>{x, w}), doctest::Contains("(primals, cotangents)"), Error);
  auto f = jit::jit(two_outputs);
  CHECK_THROWS_WITH_AS(f({x, w}, {Tensor::ones({2, 4}), Tensor::ones({2})}), doctest::Contains("vjp(f)"), Error);
}
