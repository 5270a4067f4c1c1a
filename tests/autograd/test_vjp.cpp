// Every differentiable prim's VJP rule, and the composites built on them,
// checked against central differences in f64 (autograd/gradcheck.h).
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace {

void check_gradient(const std::string& label, const Fn& f, const std::vector<Tensor>& inputs, double eps = 1e-6,
                    double atol = 1e-5, double rtol = 1e-3) {
  INFO(label);
  autograd::GradcheckResult r = autograd::gradcheck(f, inputs, eps, atol, rtol);
  CHECK_MESSAGE(r.ok, r.message);
}

// f64 samples in [-2, 2], or in [0.25, 2] when positive.
Tensor x64(const Shape& s, uint32_t seed, bool positive = false) { return sample(s, DType::f64, seed, positive); }

}  // namespace

TEST_CASE("gradcheck itself reports a wrong gradient") {
  // detach() hides one factor from autograd: analytic x, numeric 2x.
  Fn wrong = [](const std::vector<Tensor>& x) { return mul(x[0].detach(), x[0]); };
  autograd::GradcheckResult r = autograd::gradcheck(wrong, {x64({3}, 1, true)});
  CHECK(!r.ok);
  CHECK(r.message.find("input 0") != std::string::npos);
  CHECK(r.max_abs_error > 0.1);
}

TEST_CASE("gradcheck itself fails on a NaN gradient, analytic or numeric") {
  // The branch where() leaves out still carries sqrt's gradient of a negative
  // number: 0 * NaN makes the analytic gradient NaN, the numeric one is 1.
  Fn nan_analytic = [](const std::vector<Tensor>& x) { return where(gt(x[0], 10.0), sqrt(sub(x[0], 100.0)), x[0]); };
  autograd::GradcheckResult a = autograd::gradcheck(nan_analytic, {x64({3}, 2, true)});
  CHECK(!a.ok);
  CHECK(a.message.find("nan vs numeric") != std::string::npos);
  CHECK(std::isinf(a.max_abs_error));
  // Here the value is NaN at every shifted point (numeric NaN), the analytic gradient 1.
  Fn nan_numeric = [](const std::vector<Tensor>& x) { return add(x[0], mul(sqrt(sub(x[0].detach(), 100.0)), 0.0)); };
  autograd::GradcheckResult n = autograd::gradcheck(nan_numeric, {x64({3}, 3, true)});
  CHECK(!n.ok);
  const bool numeric_nan = n.message.find("numeric -nan") != std::string::npos ||
                           n.message.find("numeric nan") != std::string::npos;
  CHECK_MESSAGE(numeric_nan, n.message);
}

TEST_CASE("unary prims") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    bool positive;
  };
  const Case cases[] = {{"neg", volt::neg, false},         {"abs", volt::abs, false},
                        {"exp", volt::exp, false},         {"log", volt::log, true},
                        {"sqrt", volt::sqrt, true},        {"rsqrt", volt::rsqrt, true},
                        {"tanh", volt::tanh, false},       {"sigmoid", volt::sigmoid, false},
                        {"reciprocal", volt::reciprocal, true}};
  for (const Case& c : cases) {
    auto fn = c.fn;
    check_gradient(c.name, [fn](const std::vector<Tensor>& x) { return fn(x[0]); }, {x64({2, 3}, 2, c.positive)});
    // A non-contiguous input: the rule sees the same strides as the forward.
    check_gradient(std::string(c.name) + " of a transpose",
                   [fn](const std::vector<Tensor>& x) { return fn(x[0].t()); }, {x64({3, 2}, 3, c.positive)});
    check_gradient(std::string(c.name) + " zero-dim", [fn](const std::vector<Tensor>& x) { return fn(x[0]); },
                   {x64({}, 4, true)});
  }
  // abs on both sides of its kink, and reciprocal of negatives.
  check_gradient("abs of negatives", [](const std::vector<Tensor>& x) { return abs(x[0]); },
                 {Tensor::from_vector<double>({-1.5, -0.25, 0.5, 2.0})});
  check_gradient("reciprocal of negatives", [](const std::vector<Tensor>& x) { return reciprocal(x[0]); },
                 {Tensor::from_vector<double>({-1.5, -0.25})});
}

TEST_CASE("binary prims with broadcasting") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Value&, const Value&);
    bool positive_a, positive_b;
  };
  const Case cases[] = {{"add", volt::add, false, false},         {"sub", volt::sub, false, false},
                        {"mul", volt::mul, false, false},         {"div", volt::div, false, true},
                        {"pow", volt::pow, true, false},          {"maximum", volt::maximum, false, false},
                        {"minimum", volt::minimum, false, false}};
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 1, 4}, {3, 1}}, {{3}, {2, 3}}, {{2, 3}, {}}, {{}, {4}}, {{2, 3}, {1, 1}}};
  for (const Case& c : cases)
    for (auto [sa, sb] : shapes) {
      auto fn = c.fn;
      std::string label = std::string(c.name) + " " + shape_str(sa) + " with " + shape_str(sb);
      check_gradient(label, [fn](const std::vector<Tensor>& x) { return fn(x[0], x[1]); },
                     {x64(sa, 5, c.positive_a), x64(sb, 6, c.positive_b)});
    }
}

TEST_CASE("binary prims with a scalar on either side") {
  auto one = [](Tensor (*fn)(const Value&, const Value&), double s, bool scalar_first) -> Fn {
    return [=](const std::vector<Tensor>& x) { return scalar_first ? fn(s, x[0]) : fn(x[0], s); };
  };
  Tensor x = x64({2, 3}, 7), p = x64({2, 3}, 8, true);
  check_gradient("x + 2", one(volt::add, 2.0, false), {x});
  check_gradient("2 + x", one(volt::add, 2.0, true), {x});
  check_gradient("x - 2", one(volt::sub, 2.0, false), {x});
  check_gradient("2 - x", one(volt::sub, 2.0, true), {x});
  check_gradient("x * 3", one(volt::mul, 3.0, false), {x});
  check_gradient("3 * x", one(volt::mul, 3.0, true), {x});
  check_gradient("x / 3", one(volt::div, 3.0, false), {x});
  check_gradient("1.5 / p", one(volt::div, 1.5, true), {p});
  check_gradient("p ** 2.5", one(volt::pow, 2.5, false), {p});
  check_gradient("x ** 3", one(volt::pow, 3.0, false), {x});
  check_gradient("2 ** x", one(volt::pow, 2.0, true), {x});
  check_gradient("maximum(x, 0.3)", one(volt::maximum, 0.3, false), {x});
  check_gradient("minimum(0.3, x)", one(volt::minimum, 0.3, true), {x});
  // C++ operators with the integer literal kind.
  check_gradient("x * 2 - 1", [](const std::vector<Tensor>& v) { return v[0] * 2 - 1; }, {x});
}

TEST_CASE("where, convert_element_type") {
  Tensor cond = Tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3, 1});
  check_gradient("where broadcast", [cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); },
                 {x64({1, 4}, 9), x64({3, 4}, 10)});
  check_gradient("where with a scalar", [cond](const std::vector<Tensor>& x) { return where(cond, x[0], 0.0); },
                 {x64({3, 4}, 11)});
  check_gradient("where with a scalar first", [cond](const std::vector<Tensor>& x) { return where(cond, 1.5, x[0]); },
                 {x64({4}, 12)});
  check_gradient("convert f64 -> f64",
                 [](const std::vector<Tensor>& x) { return convert_element_type(x[0], DType::f64); }, {x64({5}, 13)});
  // Through f32 and back: a wide step keeps f32 rounding out of the difference.
  check_gradient("convert f64 -> f32 -> f64",
                 [](const std::vector<Tensor>& x) {
                   return mul(convert_element_type(mul(convert_element_type(x[0], DType::f32), 3.0), DType::f64), x[0]);
                 },
                 {x64({5}, 14)}, 1e-3, 1e-4, 1e-3);
}

TEST_CASE("shape prims: reshape, permute, expand, narrow, pad, copy") {
  Tensor x = x64({2, 3, 4}, 15);
  check_gradient("reshape", [](const std::vector<Tensor>& v) { return reshape(v[0], {6, 4}); }, {x});
  check_gradient("reshape of a transpose (copies)",
                 [](const std::vector<Tensor>& v) { return v[0].transpose(0, 2).reshape({4, 6}); }, {x});
  check_gradient("view, flatten, unsqueeze, squeeze",
                 [](const std::vector<Tensor>& v) { return v[0].view({2, 12}).unsqueeze(1).squeeze().flatten(); }, {x});
  check_gradient("permute", [](const std::vector<Tensor>& v) { return permute(v[0], {2, 0, 1}); }, {x});
  check_gradient("transpose", [](const std::vector<Tensor>& v) { return v[0].transpose(-1, 0); }, {x});
  check_gradient("expand", [](const std::vector<Tensor>& v) { return expand(v[0], {2, 3, 4}); }, {x64({3, 1}, 16)});
  check_gradient("expand leading", [](const std::vector<Tensor>& v) { return expand(v[0], {5, 3}); }, {x64({3}, 17)});
  check_gradient("narrow", [](const std::vector<Tensor>& v) { return narrow(v[0], 1, 1, 2); }, {x});
  check_gradient("select", [](const std::vector<Tensor>& v) { return v[0].select(2, -1); }, {x});
  check_gradient("slice", [](const std::vector<Tensor>& v) { return v[0].slice(0, 1, 2); }, {x});
  check_gradient("pad", [](const std::vector<Tensor>& v) { return pad(v[0], 1, 2, 1); }, {x});
  check_gradient("pad first dim", [](const std::vector<Tensor>& v) { return pad(v[0], 0, 0, 3); }, {x});
  check_gradient("copy", [](const std::vector<Tensor>& v) { return contiguous(v[0].permute({1, 2, 0})); }, {x});
  check_gradient("clone", [](const std::vector<Tensor>& v) { return v[0].clone(); }, {x});
}

TEST_CASE("reductions: sum, amax, amin over dim sets") {
  Tensor x = x64({2, 3, 4}, 18);
  for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1}, {-1}, {0, 2}, {0, 1, 2}})
    for (bool keep : {false, true}) {
      std::string label = "dims " + shape_str(dims) + (keep ? " keepdim" : "");
      check_gradient("sum " + label, [=](const std::vector<Tensor>& v) { return sum(v[0], dims, keep); }, {x});
      check_gradient("amax " + label, [=](const std::vector<Tensor>& v) { return amax(v[0], dims, keep); }, {x});
      check_gradient("amin " + label, [=](const std::vector<Tensor>& v) { return amin(v[0], dims, keep); }, {x});
    }
  check_gradient("sum of a zero-dim tensor", [](const std::vector<Tensor>& v) { return sum(v[0]); }, {x64({}, 19)});
  check_gradient("sum of a zero-dim tensor over dim 0",
                 [](const std::vector<Tensor>& v) { return sum(v[0], {0}); }, {x64({}, 19)});
  check_gradient("sum of a non-contiguous tensor", [](const std::vector<Tensor>& v) { return sum(v[0].t(), {0}); },
                 {x64({3, 5}, 20)});
}

TEST_CASE("matmul in every rank combination, and linear") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5}, {5}},         {{5}, {5, 3}},         {{4, 5}, {5}},      {{4, 5}, {5, 3}},
      {{2, 4, 5}, {5, 3}}, {{4, 5}, {2, 5, 3}},  {{2, 1, 4, 5}, {3, 5, 2}}, {{5}, {2, 5, 3}},
      {{2, 3, 4, 5}, {5}}};
  for (auto [sa, sb] : shapes)
    check_gradient("matmul " + shape_str(sa) + " @ " + shape_str(sb),
                   [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }, {x64(sa, 21), x64(sb, 22)});
  check_gradient("matmul of transposed operands",
                 [](const std::vector<Tensor>& v) { return matmul(v[0].t(), v[1].t()); }, {x64({5, 4}, 23), x64({3, 5}, 24)});
  for (Shape xs : {Shape{4, 5}, Shape{5}, Shape{2, 4, 5}}) {
    check_gradient("linear with bias x" + shape_str(xs),
                   [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
                   {x64(xs, 25), x64({3, 5}, 26), x64({3}, 27)});
    check_gradient("linear without bias x" + shape_str(xs),
                   [](const std::vector<Tensor>& v) { return linear(v[0], v[1]); }, {x64(xs, 28), x64({3, 5}, 29)});
  }
  check_gradient("linear of a transposed weight",
                 [](const std::vector<Tensor>& v) { return linear(v[0], v[1].t(), v[2]); },
                 {x64({4, 5}, 30), x64({5, 3}, 31), x64({3}, 32)});
}

TEST_CASE("composites: relu, dropout, softmax, log_softmax, losses, mean, var") {
  Tensor x = x64({3, 5}, 33);
  check_gradient("relu", [](const std::vector<Tensor>& v) { return relu(v[0]); }, {x});
  check_gradient("relu method", [](const std::vector<Tensor>& v) { return v[0].relu(); }, {x});
  // The mask must be the same in every evaluation: re-seed inside f.
  check_gradient("dropout", [](const std::vector<Tensor>& v) {
    manual_seed(123);
    return dropout(v[0], 0.4, true);
  }, {x});
  check_gradient("dropout in eval mode", [](const std::vector<Tensor>& v) { return dropout(v[0], 0.4, false); }, {x});
  for (int64_t d : {0, 1, -1}) {
    check_gradient("softmax dim " + std::to_string(d), [d](const std::vector<Tensor>& v) { return softmax(v[0], d); },
                   {x});
    check_gradient("log_softmax dim " + std::to_string(d),
                   [d](const std::vector<Tensor>& v) { return log_softmax(v[0], d); }, {x});
  }
  Tensor target = Tensor::from_vector<int64_t>({4, 0, 2});
  check_gradient("nll_loss", [target](const std::vector<Tensor>& v) { return nll_loss(v[0], target); }, {x});
  check_gradient("cross_entropy", [target](const std::vector<Tensor>& v) { return cross_entropy(v[0], target); },
                 {x});
  check_gradient("nll_loss of log_softmax",
                 [target](const std::vector<Tensor>& v) { return nll_loss(log_softmax(v[0], 1), target); }, {x});
  Tensor y = x64({2, 3, 4}, 34);
  for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1, 2}, {-1}})
    for (bool keep : {false, true}) {
      std::string label = "dims " + shape_str(dims) + (keep ? " keepdim" : "");
      check_gradient("mean " + label, [=](const std::vector<Tensor>& v) { return mean(v[0], dims, keep); }, {y});
      check_gradient("var " + label, [=](const std::vector<Tensor>& v) { return var(v[0], dims, keep); }, {y});
    }
  check_gradient("var correction 0", [](const std::vector<Tensor>& v) { return var(v[0], {1}, false, 0); }, {y});
}

TEST_CASE("a small network end to end") {
  // x (4, 5) -> linear(5 -> 3) -> tanh -> linear(3 -> 2) -> cross_entropy
  Tensor target = Tensor::from_vector<int64_t>({1, 0, 1, 1});
  check_gradient("mlp",
                 [target](const std::vector<Tensor>& v) {
                   Tensor h = tanh(linear(v[0], v[1], v[2]));
                   return cross_entropy(linear(h, v[3], v[4]), target);
                 },
                 {x64({4, 5}, 35), x64({3, 5}, 36), x64({3}, 37), x64({2, 3}, 38), x64({2}, 39)});
}
