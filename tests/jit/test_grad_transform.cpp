// Grad transforms in Thunder's form (jit/grad_transform.h): the transform
// restates the forward, reads get_grad, hands back put_grads, returns the
// forward's result.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;
using jit::OperatorExecutor;

namespace {

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("grad transform: a forward value the transform computes is saved, not recomputed") {
  // exp's gradient is g * exp(x): the transform reuses its forward result.
  OperatorExecutor ex("gt_exp", "0.1");
  int transform_runs = 0;
  ex.register_implementation(OpId::exp, {.grad_transform = [&](const std::vector<Value>& v) {
                                           ++transform_runs;
                                           Tensor fwd = exp(v[0].tensor);
                                           jit::put_grad(v[0].tensor, mul(jit::get_grad(fwd), fwd));
                                           return std::vector<Tensor>{fwd};
                                         }});
  auto f = jit::jit([](const std::vector<Tensor>& x) { return std::vector<Tensor>{sum(exp(x[0]))}; },
                    {.executors = {ex}});
  manual_seed(5);
  Tensor x = Tensor::randn({3, 4});
  Tensor leaf = x.clone();
  leaf.requires_grad_();
  Tensor loss = f(leaf);
  loss.backward();
  // d/dx sum(exp(x)) = exp(x), computed in f64 from the input.
  std::vector<float> xv = x.to_vector<float>(), gv = leaf.grad().to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) CHECK(gv[i] == doctest::Approx(std::exp(double(xv[i]))).epsilon(1e-6));
  CHECK(transform_runs == 1);
  // The backward reads the saved exp(x) and computes no exp of its own.
  const std::string bwd = jit::last_backward_traces(f).front().str();
  CHECK(bwd.find("exp(") == std::string::npos);
  const std::string fwd = jit::last_traces(f).back().str();
  CHECK(count_of(fwd, "prims.exp(") == 1);
}

TEST_CASE("grad transform: one input passed twice gets the sum of its two gradients") {
  OperatorExecutor ex("gt_square", "0.1");
  ex.register_implementation(OpId::mul, {.grad_transform = [](const std::vector<Value>& v) {
                                           Tensor a = v[0].tensor, b = v[1].tensor;
                                           Tensor fwd = mul(a, b);
                                           Tensor g = jit::get_grad(fwd);
                                           jit::put_grads({a, b}, {mul(g, b), mul(g, a)});
                                           return std::vector<Tensor>{fwd};
                                         }});
  auto f = jit::jit([](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], x[0])}; },
                    {.executors = {ex}});
  auto g = jit::value_and_grad(f);
  Tensor x = Tensor::from_vector<float>({1.5f, -2.0f, 3.0f});
  std::vector<Tensor> r = g(std::vector<Tensor>{x});
  REQUIRE(r.size() == 2);
  CHECK(r[0].to_vector<float>() == std::vector<float>{2.25f, 4.0f, 9.0f});
  CHECK(r[1].to_vector<float>() == std::vector<float>{3.0f, -4.0f, 6.0f});  // 2x
}

TEST_CASE("grad transform: its forward may compute more than the op, for backward to use") {
  // sum(x) with the count of positive elements computed in the forward (a
  // value the op does not return), used by a backward that masks the gradient:
  // a contrived rule, but its result is easy to state: d/dx = (x > 0) * g.
  OperatorExecutor ex("gt_extra", "0.1");
  ex.register_implementation(OpId::relu, {.grad_transform = [](const std::vector<Value>& v) {
                                            Tensor x = v[0].tensor;
                                            Tensor mask = convert_element_type(gt(x, 0.0), x.dtype());
                                            Tensor fwd = mul(x, mask);
                                            jit::put_grad(x, mul(jit::get_grad(fwd), mask));
                                            return std::vector<Tensor>{fwd};
                                          }});
  auto f = jit::jit([](const std::vector<Tensor>& x) { return std::vector<Tensor>{sum(relu(x[0]))}; },
                    {.executors = {ex}});
  auto g = jit::grad(f);
  Tensor x = Tensor::from_vector<float>({-1.0f, 2.0f, 0.5f, -3.0f});
  CHECK(g(std::vector<Tensor>{x})[0].to_vector<float>() == std::vector<float>{0, 1, 1, 0});
  const std::string s = jit::last_traces(g).back().str();
  CHECK(s.find("relu") == std::string::npos);  // replaced by the transform's own forward
}

TEST_CASE("grad transform: mistakes are errors naming the op") {
  CHECK_THROWS_WITH_AS(jit::get_grad(Tensor::ones({2})), doctest::Contains("get_grad: called outside a grad transform"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(jit::put_grads({Tensor::ones({2})}, {Tensor::ones({2})}),
                       doctest::Contains("put_grads: called outside a grad transform"), volt::Error);
  auto run = [](OperatorExecutor::GradTransform t) {
    OperatorExecutor ex("gt_bad", "0.1");
    ex.register_implementation(OpId::mul, {.grad_transform = std::move(t)});
    auto g = jit::grad(jit::jit([](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], x[1])}; },
                                {.executors = {ex}}));
    g({Tensor::ones({2}), Tensor::ones({2})});
  };
  CHECK_THROWS_WITH_AS(run([](const std::vector<Value>&) { return std::vector<Tensor>{}; }),
                       doctest::Contains("mul: its grad transform returned 0 values; it must return the op's 1 output"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(run([](const std::vector<Value>& v) {
                         Tensor fwd = mul(v[0].tensor, v[1]);
                         jit::get_grad(v[0].tensor);
                         return std::vector<Tensor>{fwd};
                       }),
                       doctest::Contains("mul: its grad transform asked get_grad for a value it does not return"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(run([](const std::vector<Value>& v) {
                         Tensor fwd = mul(v[0].tensor, v[1]);
                         jit::put_grads({fwd}, {jit::get_grad(fwd)});
                         return std::vector<Tensor>{fwd};
                       }),
                       doctest::Contains("mul: its grad transform put a gradient for a value that is not one of its inputs"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(run([](const std::vector<Value>& v) {
                         Tensor fwd = mul(v[0].tensor, v[1]);
                         jit::put_grads({v[0].tensor}, {Tensor::ones({3})});
                         return std::vector<Tensor>{fwd};
                       }),
                       doctest::Contains("put_grads: the gradient of input 0 of mul is"), volt::Error);
}
