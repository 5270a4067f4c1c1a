// volt_erf (tensor/math_functions.inc), the erf that the CPU kernels and the
// generated host kernels call: f32 a Chebyshev series that vectorises, f64
// libm's.  Checked against std::erf in double over a dense grid, at the
// special values, and through the eager op and a fused jit region.
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
