// volt_erf and volt_exp (tensor/math_functions.inc), the erf and exp that the
// CPU kernels and the generated host kernels call: in f32 polynomials that
// vectorise, in f64 libm's.  Checked against std::erf and std::exp in double
// over dense grids, at the special values, and through the eager op and a
// fused jit region.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/op_exprs.h>
#include <volt/tensor/ops.h>

using namespace volt;
using volt::op_exprs::volt_erf;
using volt::op_exprs::volt_exp;

TEST_CASE("volt_erf in f32: within 3e-7 (absolute) and 4e-7 (relative) of erf in double over [-8, 8]") {
  double worst_abs = 0, worst_rel = 0;
  // Every 2^-14 (131 073 points), then points between them.
  for (int64_t k = -(int64_t(8) << 14); k <= (int64_t(8) << 14); ++k)
    for (float x : {float(double(k) / 16384.0), float((double(k) + 0.37) / 16384.0)}) {
      const double want = std::erf(double(x)), got = volt_erf(x);
      worst_abs = std::max(worst_abs, std::fabs(got - want));
      if (want != 0) worst_rel = std::max(worst_rel, std::fabs(got - want) / std::fabs(want));
    }
  CHECK(worst_abs < 3e-7);
  CHECK(worst_rel < 4e-7);
  // Small arguments keep their relative accuracy (erf(x) ~ 2x/sqrt(pi)), subnormals included.
  for (float x : {1e-3f, 1e-10f, 1e-30f, 1e-40f, -2e-20f}) {
    CAPTURE(x);
    CHECK(std::fabs(volt_erf(x) - std::erf(double(x))) <= 4e-7 * std::fabs(std::erf(double(x))));
  }
}

TEST_CASE("volt_erf in f32: odd, exactly +-1 from |x| = 4 on, and through inf, NaN and -0") {
  for (float x = 0; x < 6; x += 0.001f) CHECK_MESSAGE(volt_erf(-x) == -volt_erf(x), x);
  for (float x : {4.0f, 4.5f, 100.0f, 3e38f}) {
    CHECK(volt_erf(x) == 1.0f);
    CHECK(volt_erf(-x) == -1.0f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(volt_erf(inf) == 1.0f);
  CHECK(volt_erf(-inf) == -1.0f);
  CHECK(std::isnan(volt_erf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(volt_erf(0.0f) == 0.0f);
  CHECK(std::signbit(volt_erf(-0.0f)));
  // Just under 4, where the series meets the constant: within the bound, no step past it.
  CHECK(std::fabs(volt_erf(std::nextafter(4.0f, 0.0f)) - 1.0) < 3e-7);
}

TEST_CASE("volt_erf in f64 is libm's erf") {
  for (double x = -7; x <= 7; x += 0.013) CHECK(volt_erf(x) == std::erf(x));
}

TEST_CASE("erf on f32: the eager op and a fused jit region compute volt_erf (f64 reference)") {
  std::vector<float> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(float(i) * 0.0013f);
  const Tensor x = Tensor::from_vector<float>(xs);
  const std::vector<float> eager = erf(x).to_vector<float>();
  // Two prims, so a region of cpu-fusion computes it by a generated kernel.
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{mul(erf(a[0]), 2.0)}; });
  const std::vector<float> fused = f({x}).at(0).to_vector<float>();
  REQUIRE(eager.size() == xs.size());
  REQUIRE(fused.size() == xs.size());
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(eager[i] == volt_erf(xs[i]));
    CHECK(fused[i] == 2.0f * volt_erf(xs[i]));
    worst = std::max(worst, std::fabs(double(eager[i]) - std::erf(double(xs[i]))));
  }
  CHECK(worst < 3e-7);
  CHECK(jit::last_traces(f).back().str().find("cpuFusion") != std::string::npos);
}

namespace {

// The distance from got to want in f32 ulps at want.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = double(std::nextafter(w, INFINITY)) - double(w);
  return std::fabs(double(got) - want) / ulp;
}

}  // namespace

TEST_CASE("volt_exp in f32: within 1 ulp of exp in double over [-87.3, 88.72]") {
  double worst = 0;
  float at = 0;
  for (double x = -87.33; x <= 88.7228; x += 1.0 / 4096)
    for (float xf : {float(x), float(x + 0.3 / 4096)}) {
      const double e = ulps(volt_exp(xf), std::exp(double(xf)));
      if (e > worst) worst = e, at = xf;
    }
  CAPTURE(at);
  CHECK(worst < 1.0);
  // Near 0, where exp(x) = 1 + x + ...: every float in [-2^-10, 2^-10] at a step of 2^-30.
  for (int64_t k = -(1 << 20); k <= (1 << 20); k += 7) {
    const float x = std::ldexp(float(k), -30);
    CHECK_MESSAGE(ulps(volt_exp(x), std::exp(double(x))) < 1.0, x);
  }
}

TEST_CASE("volt_exp in f32: overflow, underflow, inf, NaN; f64 is libm's") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(volt_exp(88.73f) == inf);
  CHECK(volt_exp(1000.0f) == inf);
  CHECK(volt_exp(inf) == inf);
  CHECK(volt_exp(-inf) == 0.0f);
  CHECK(volt_exp(-105.0f) == 0.0f);
  CHECK(std::isnan(volt_exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(volt_exp(0.0f) == 1.0f);
  CHECK(volt_exp(88.7228f) > 3.4e38f);  // the largest finite results stay finite
  CHECK(std::isfinite(volt_exp(88.7228f)));
  // Between -104 and -87.3 the result is subnormal or 0 (0 where the CPU flushes subnormals): never above the normal range.
  for (float x = -104.0f; x < -87.34f; x += 0.25f) CHECK(volt_exp(x) < std::numeric_limits<float>::min());
  for (double x = -700; x <= 700; x += 0.37) CHECK(volt_exp(x) == std::exp(x));
}

TEST_CASE("exp on f32: the eager op and a fused jit region compute volt_exp (f64 reference)") {
  std::vector<float> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(float(i) * 0.021f);
  const Tensor x = Tensor::from_vector<float>(xs);
  const std::vector<float> eager = exp(x).to_vector<float>();
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{mul(exp(neg(a[0])), 2.0)}; });
  const std::vector<float> fused = f({x}).at(0).to_vector<float>();
  REQUIRE(fused.size() == xs.size());
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(eager[i] == volt_exp(xs[i]));
    CHECK(fused[i] == 2.0f * volt_exp(-xs[i]));
    worst = std::max(worst, ulps(eager[i], std::exp(double(xs[i]))));
  }
  CHECK(worst < 1.0);
  CHECK(jit::last_traces(f).back().str().find("cpuFusion") != std::string::npos);
}
