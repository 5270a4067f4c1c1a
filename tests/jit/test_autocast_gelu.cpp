// gelu under autocast: on the f32 list, so a bf16 input is widened, the
// erf/tanh decomposition runs in f32 and the next GEMM's cast rounds once;
// eagerly and under the module jit alike, against an f64 reference.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

double gelu_f64(double x, bool tanh_approx) {
  if (!tanh_approx) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<Tensor> block(const std::vector<Tensor>& a) {  // linear -> gelu -> linear
  return {linear(gelu(linear(a[0], a[1])), a[2])};
}

}  // namespace

TEST_CASE("autocast gelu: on the f32 list; eager and jit compute it in f32 on the bf16 values (f64 reference)") {
  CHECK(autocast_rule(OpId::gelu) == AutocastRule::Float32);
  manual_seed(21);
  const Tensor x = mul(Tensor::randn({37, 11}), 3.0).to(DType::bf16);
  const std::vector<double> xs = x.to_vector<double>();
  for (bool tanh_approx : {false, true}) {
    CAPTURE(tanh_approx);
    Tensor y;
    {
      AutocastGuard amp(DType::bf16);
      y = gelu(x, tanh_approx ? "tanh" : "none");
    }
    REQUIRE(y.dtype() == DType::f32);
    CHECK(max_abs_diff(y, gelu(x.to(DType::f32), tanh_approx ? "tanh" : "none")) == 0);
    std::vector<double> want(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) want[i] = gelu_f64(xs[i], tanh_approx);
    CHECK(volt::testing::max_abs_diff(y.to_vector<double>(), want) < 2e-6);  // f32, not bf16's 2^-8
  }
  // The module jit: the region around gelu reads bf16 and its prims are f32; equal to eager under the guard.
  const Tensor w1 = Tensor::randn({16, 11}), w2 = Tensor::randn({5, 16});
  const Tensor xf = x.to(DType::f32);
  auto f = jit::jit(block).with_autocast(DType::bf16);
  const Tensor got = f({xf, w1, w2}).at(0);
  Tensor want;
  {
    AutocastGuard amp(DType::bf16);
    want = block({xf, w1, w2}).at(0);
  }
  CHECK(got.dtype() == DType::bf16);
  CHECK(max_abs_diff(got.to(DType::f32), want.to(DType::f32)) == 0);
  std::istringstream trace(jit::last_traces(f).back().str());
  int erf_lines = 0;
  for (std::string line; std::getline(trace, line);)
    if (line.find("erf(") != std::string::npos) {
      ++erf_lines;
      CAPTURE(line);
      CHECK(line.find("f32[") != std::string::npos);
      CHECK(line.find("bf16[") == std::string::npos);
    }
  CHECK(erf_lines > 0);
}
