// Ops on bf16 and f16 tensors on the CPU.  Each op computes in f32 and rounds
// once, so its result must equal, bit for bit (tolerance 0), the f32 op run on
// the same values widened to f32 and then rounded; reductions and products
// are also checked against f64 loops within the type's rounding.
#include <doctest/doctest.h>

#include "tests/tensor/reference.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <volt/autograd/grad_mode.h>
#include <volt/autograd/node.h>
#include <volt/jit/jit.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using volt::testing::bits16;

namespace {

// Values exactly representable in dt: f32 draws rounded to dt.
Tensor sample(const Shape& shape, DType dt, uint64_t seed, double lo = -2, double hi = 2) {
  manual_seed(seed);
  return add(mul(rand(shape), hi - lo), lo).to(dt);
}

// op(xs in dt) must equal op(xs widened to f32) rounded to the result's dtype.
void check_like_f32(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& op,
                    const std::vector<Tensor>& xs) {
  CAPTURE(name);
  std::vector<Tensor> wide;
  for (const Tensor& x : xs) wide.push_back(x.to(kF32));
  const Tensor got = op(xs), want32 = op(wide);
  const DType dt = xs[0].dtype();
  if (want32.dtype() != DType::f32) {  // comparisons, argmax: the same values
    CHECK(got.dtype() == want32.dtype());
    CHECK(got.to(kF64).to_vector<double>() == want32.to(kF64).to_vector<double>());
    return;
  }
  REQUIRE(got.dtype() == dt);
  CHECK(got.sizes() == want32.sizes());
  CHECK(bits16(got) == bits16(want32.to(dt)));
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

}  // namespace

TEST_CASE("bf16 and f16 elementwise ops equal the f32 op on the same values, rounded once") {
  const std::vector<std::pair<std::string, Fn>> unary = {
      {"neg", [](auto& v) { return neg(v[0]); }},           {"abs", [](auto& v) { return abs(v[0]); }},
      {"exp", [](auto& v) { return exp(v[0]); }},           {"tanh", [](auto& v) { return tanh(v[0]); }},
      {"sigmoid", [](auto& v) { return sigmoid(v[0]); }},   {"erf", [](auto& v) { return erf(v[0]); }},
      {"relu", [](auto& v) { return relu(v[0]); }},         {"mul 2.5", [](auto& v) { return mul(v[0], 2.5); }},
      {"add 1", [](auto& v) { return add(v[0], 1); }},      {"clamp", [](auto& v) { return clamp(v[0], -0.5, 0.7); }},
      {"gelu", [](auto& v) { return gelu(v[0]); }},
  };
  const std::vector<std::pair<std::string, Fn>> positive = {
      {"log", [](auto& v) { return log(v[0]); }},
      {"sqrt", [](auto& v) { return sqrt(v[0]); }},
      {"rsqrt", [](auto& v) { return rsqrt(v[0]); }},
      {"reciprocal", [](auto& v) { return reciprocal(v[0]); }},
      {"pow", [](auto& v) { return pow(v[0], v[1]); }},
  };
  const std::vector<std::pair<std::string, Fn>> binary = {
      {"add", [](auto& v) { return add(v[0], v[1]); }},     {"sub", [](auto& v) { return sub(v[0], v[1]); }},
      {"mul", [](auto& v) { return mul(v[0], v[1]); }},     {"div", [](auto& v) { return div(v[0], v[1]); }},
      {"maximum", [](auto& v) { return maximum(v[0], v[1]); }},
      {"minimum", [](auto& v) { return minimum(v[0], v[1]); }},
      {"lt", [](auto& v) { return lt(v[0], v[1]); }},       {"eq", [](auto& v) { return eq(v[0], v[1]); }},
      {"where", [](auto& v) { return where(gt(v[0], 0.0), v[0], v[1]); }},
  };
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = sample({7, 33}, dt, 1), y = sample({7, 33}, dt, 2);
    const Tensor row = sample({33}, dt, 3), xt = sample({33, 7}, dt, 4).t();  // broadcast, transposed
    const Tensor px = sample({7, 33}, dt, 5, 0.1, 3), py = sample({7, 33}, dt, 6, -2, 2);
    for (auto& [name, f] : unary) {
      check_like_f32(name, f, {x});
      check_like_f32(name + " (transposed)", f, {xt});
    }
    for (auto& [name, f] : positive) check_like_f32(name, f, {px, py});
    for (auto& [name, f] : binary) {
      check_like_f32(name, f, {x, y});
      check_like_f32(name + " (broadcast row)", f, {x, row});
      check_like_f32(name + " (transposed)", f, {xt, y});
    }
    // An in-place update rounds like the out-of-place op.
    Tensor z = x.clone();
    z.add_(y);
    CHECK(bits16(z) == bits16(add(x.to(kF32), y.to(kF32)).to(dt)));
  }
}

TEST_CASE("bf16 and f16 reductions and composites compute in f32 and round once") {
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"sum", [](auto& v) { return sum(v[0]); }},
      {"sum dim 1", [](auto& v) { return sum(v[0], {1}); }},
      {"mean dim 0", [](auto& v) { return mean(v[0], {0}, true); }},
      {"amax", [](auto& v) { return amax(v[0], {1}); }},
      {"amin", [](auto& v) { return amin(v[0]); }},
      {"argmax", [](auto& v) { return argmax(v[0], 1); }},
      {"var", [](auto& v) { return var(v[0], {1}); }},
      {"softmax", [](auto& v) { return softmax(v[0], 1); }},
      {"log_softmax", [](auto& v) { return log_softmax(v[0], 0); }},
      {"layer_norm", [](auto& v) { return layer_norm(v[0], {33}); }},
  };
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = sample({9, 33}, dt, 7);
    for (auto& [name, f] : ops) check_like_f32(name, f, {x});
    // Against an f64 loop: the sum of 2000 values is one f32 sum rounded once,
    // so within half a unit of dt's last place (plus f32's own rounding).
    const Tensor big = sample({2000}, dt, 8, 0, 1);
    const std::vector<double> v = big.to(kF64).to_vector<double>();
    double ref = 0;
    for (double e : v) ref += e;
    const double ulp = dt == kBF16 ? 0x1p-8 : 0x1p-11;
    CHECK(std::fabs(sum(big).item<double>() - ref) <= ulp * std::fabs(ref) / 2 + 2000 * 0x1p-24 * ref);
  }
}

TEST_CASE("autograd on bf16 and f16: gradients in the parameters' dtype, close to the f32 ones") {
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x0 = sample({4, 6}, dt, 9), w0 = sample({3, 6}, dt, 10), b0 = sample({3}, dt, 11);
    auto grads = [&](DType as) {
      // detach: fresh leaves (to() of the same dtype returns the tensor itself).
      Tensor x = x0.to(as).detach().requires_grad_(), w = w0.to(as).detach().requires_grad_(),
             b = b0.to(as).detach().requires_grad_();
      Tensor loss = sum(mul(tanh(linear(x, w, b)), 0.5));
      loss.backward();
      return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
    };
    const std::vector<Tensor> g = grads(dt), g32 = grads(kF32);
    // Each backward op rounds to dt: a few units of its last place.
    const double tol = dt == kBF16 ? 0x1p-5 : 0x1p-8;
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(i);
      CHECK(g[i].dtype() == dt);
      const std::vector<double> a = g[i].to(kF64).to_vector<double>(), b = g32[i].to(kF64).to_vector<double>();
      for (size_t j = 0; j < a.size(); ++j) CHECK(std::fabs(a[j] - b[j]) <= tol * (1 + std::fabs(b[j])));
    }
  }
}

TEST_CASE("bf16 and f16: what volt does not support yet is a clear error") {
  CHECK_THROWS_WITH_AS(randint(0, 3, {2}, kF16), doctest::Contains("randint"), volt::Error);
}

TEST_CASE("bf16: a jitted softmax runs its reductions eagerly (row kernels take f32 only), within a rounding of eager") {
  const Tensor x = Tensor::randn({2, 3}).to(kBF16);
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{softmax(a[0], 1)}; });
  const Tensor got = f({x})[0], want = softmax(x, 1);  // eager: in f32, rounded once
  REQUIRE(got.dtype() == kBF16);
  const std::vector<double> g = got.to(kF64).to_vector<double>(), w = want.to(kF64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - w[i]) <= 4.0 / 256 * w[i]);  // a few bf16 roundings
}
