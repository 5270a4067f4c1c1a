// Row regions (jit/codegen_rows.cpp): a softmax, a log_softmax and a
// LayerNorm, forward and backward, each become one generated kernel per
// direction, and their results equal eager mode's (the eager kernels run the
// same prims one by one) at short, odd and long rows, in f32 and f64, with
// -inf masks, large magnitudes and NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/jit/row_kernels.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_close;
using volt::testing::row_kernels;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f's output and the gradients of sum(f * w), eagerly or jitted.
std::vector<Tensor> run(const Fn& f, const std::vector<Tensor>& xs, const Tensor& w, jit::JitFunction* jf) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : xs) leaves.push_back(x.detach().clone().requires_grad_());
  Tensor y = jf ? (*jf)(leaves).at(0) : f(leaves);
  std::vector<Tensor> r{y.detach()};
  sum(mul(y, w)).backward();
  for (const Tensor& l : leaves) r.push_back(l.grad().defined() ? l.grad() : Tensor::zeros(l.sizes(), l.dtype()));
  return r;
}

void compare(const std::string& label, const Fn& f, const std::vector<Tensor>& xs, double tol) {
  Tensor w = Tensor::randn(f(xs).sizes(), xs[0].dtype());
  auto jf = jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  const auto want = run(f, xs, w, nullptr);
  const auto got = run(f, xs, w, &jf);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    check_close(label + (i == 0 ? " output" : " gradient " + std::to_string(i - 1)), got[i], want[i], tol, tol);
  // One row region each way, and no row reduction left to run on its own.
  INFO(label);
  auto [fwd, fwd_outside] = row_kernels(jit::last_traces(jf).back());
  auto [bwd, bwd_outside] = row_kernels(jit::last_backward_traces(jf).back());
  CHECK(fwd == 1);
  CHECK(fwd_outside == 0);
  CHECK(bwd == (xs[0].sizes().back() == 1 && xs.size() > 1 ? 0 : 1));  // a LayerNorm over 1 has nothing to sum
  CHECK(bwd_outside == 0);
}

}  // namespace

TEST_CASE("jit row regions: softmax, log_softmax and layer_norm are one kernel each way and equal eager") {
  manual_seed(3);
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-5 : 1e-11;
    for (int64_t L : {1, 2, 7, 16, 17, 1000, 4097}) {
      const std::string at = std::string(dtype_name(dt)) + " rows of " + std::to_string(L);
      Tensor x = mul(Tensor::randn({3, L}, dt), 3.0);
      compare("softmax " + at, [](const std::vector<Tensor>& in) { return softmax(in[0], -1); }, {x}, tol);
      compare("log_softmax " + at, [](const std::vector<Tensor>& in) { return log_softmax(in[0], -1); }, {x}, tol);
      Tensor g = Tensor::randn({L}, dt), b = Tensor::randn({L}, dt);
      compare("layer_norm " + at,
              [L](const std::vector<Tensor>& in) { return layer_norm(in[0], {L}, in[1], in[2]); }, {x, g, b}, tol);
    }
  }
}

TEST_CASE("jit row regions: -inf masks, large magnitudes and NaN as eager mode has them") {
  const double inf = std::numeric_limits<double>::infinity();
  // Rows a softmax must not overflow on, rows a causal mask hides most of, a NaN row.
  Tensor x = Tensor::from_vector<float>({1e4f, -1e4f, 0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 3});
  Tensor hide = Tensor::from_vector<float>({0, 0, 0, 0, 1, 1, 1, 0, 1}, {3, 3});
  Fn masked = [inf](const std::vector<Tensor>& in) { return softmax(masked_fill(in[0], gt(in[1], 0.5), -inf), -1); };
  compare("masked softmax", masked, {x, hide}, 1e-6);
  // A causal mask (T, T) broadcast over (batch, heads, T, T) scores: read per row, then along it.
  Tensor scores = Tensor::randn({2, 3, 5, 5});
  Tensor future = triu(Tensor::ones({5, 5}), 1);
  compare("causal softmax", masked, {scores, future}, 1e-6);
  compare("softmax of [1e4, -1e4, 0]", [](const std::vector<Tensor>& in) { return softmax(in[0], -1); }, {x}, 1e-6);
  // NaN anywhere in a row makes its amax NaN (as the eager kernel's), and the row's softmax NaN.
  Tensor n = Tensor::from_vector<float>({1.f, NAN, 2.f, 1.f, 2.f, 3.f}, {2, 3});
  auto jf = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in[0], -1), amax(in[0], {1}, true)}; });
  std::vector<Tensor> got = jf({n});
  check_close("softmax with NaN", got[0], softmax(n, -1));
  check_close("amax with NaN", got[1], amax(n, {1}, true));
  CHECK(std::isnan(got[1].to_vector<float>()[0]));
  CHECK(got[1].to_vector<float>()[1] == 3.f);
}

TEST_CASE("jit row regions: equal IR gives equal keys; the row length is part of the kernel") {
  auto softmax_of = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in[0], -1)}; };
  auto keys = [&](const Shape& shape) {
    auto jf = jit::jit(softmax_of);
    jf({Tensor::randn(shape)});
    std::set<std::string> r;
    for (const auto& k : jit::last_kernels(jf)) {
      CHECK(k->row_len == shape.back());
      CHECK(k->extent == shape_numel(shape) / shape.back());
      r.insert(k->key);
    }
    return r;
  };
  const std::set<std::string> a = keys({4, 33}), b = keys({9, 33}), c = keys({2, 3, 33}), d = keys({4, 34});
  CHECK(a.size() == 1);
  CHECK(a == b);  // the number of rows is a launch argument
  CHECK(a == c);
  CHECK(a != d);
  // The generated kernel walks the row in three passes: the max, the sum, the outputs.
  auto jf = jit::jit(softmax_of);
  jf({Tensor::randn({4, 33})});
  const std::string src = jit::last_kernel_sources(jf).at(0);
  size_t passes = 0;
  for (size_t p = src.find("VOLT_COLS"); p != std::string::npos; p = src.find("VOLT_COLS", p + 1)) ++passes;
  CHECK(passes == 3);
  CHECK(src.find("VOLT_ROW_MAX") != std::string::npos);
  CHECK(src.find("VOLT_ROW_SUM") != std::string::npos);
}

TEST_CASE("jit row regions: a reduction over another dim, or without keepdim, is no row reduction") {
  auto jf = jit::jit([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(exp(in[0]), {0}, true), sum(exp(in[0]), {1}, false)};
  });
  Tensor x = Tensor::randn({5, 6});
  std::vector<Tensor> got = jf({x});
  check_close("sum over dim 0", got[0], sum(exp(x), {0}, true));
  check_close("sum without keepdim", got[1], sum(exp(x), {1}, false));
  for (const jit::BoundSymbol& b : jit::last_traces(jf).back().bsyms) CHECK_FALSE(jit::is_row_region(b));
}
