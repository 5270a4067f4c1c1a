// Operator executors: new operators, implementations claimed by a checker,
// execution and grad transforms, priority order, and their errors.
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

// multimul with plain loops: (a * b, c * d) for same-shape f32 CPU tensors or scalars.
Tensor loop_mul(const Value& x, const Value& y, const Shape& shape) {
  Tensor out = Tensor::empty(shape, DType::f32, kCPU);
  float* o = out.data_ptr<float>();
  int64_t n = out.numel();
  auto at = [n](const Value& v, int64_t i) -> float {
    if (!v.is_tensor) return static_cast<float>(v.scalar.value);
    Tensor c = v.tensor.contiguous();
    return c.numel() == n ? c.data_ptr<float>()[i] : c.data_ptr<float>()[0];
  };
  for (int64_t i = 0; i < n; ++i) o[i] = at(x, i) * at(y, i);
  return out;
}

Shape shape_of(const Value& a, const Value& b) {
  if (a.is_tensor) return a.tensor.sizes();
  if (b.is_tensor) return b.tensor.sizes();
  return {};
}

std::vector<Tensor> multimul_impl(const std::vector<Value>& v) {
  return {loop_mul(v[0], v[1], shape_of(v[0], v[1])), loop_mul(v[2], v[3], shape_of(v[2], v[3]))};
}

std::vector<Tensor> multimul_like(const std::vector<Value>& v) {
  auto mul_of = [](const Value& x, const Value& y) {
    if (x.is_tensor) return mul(x.tensor, y);
    if (y.is_tensor) return mul(y.tensor, x);
    return Tensor::full({}, x.scalar.value * y.scalar.value, DType::f32, kCPU);
  };
  return {mul_of(v[0], v[1]), mul_of(v[2], v[3])};
}

bool all_cpu(const std::vector<Value>& v) {
  for (const Value& x : v)
    if (x.is_tensor && !x.tensor.device().is_cpu()) return false;
  return true;
}

std::vector<Tensor> mul_fn(const std::vector<Tensor>& x) { return {mul(x[0], x[1])}; }

}  // namespace

TEST_CASE("executors: a registered operator is traced under its name and run by its implementation") {
  OperatorExecutor myex("myex_a", "0.1");
  int calls = 0;
  auto multimul = myex.register_operator(
      "multimul", {.like = multimul_like, .fn = [&](const std::vector<Value>& v) {
                     ++calls;
                     return multimul_impl(v);
                   }});
  auto foo = [&](const std::vector<Tensor>& x) { return multimul(x[0], x[1], x[2], x[3]); };
  auto cfoo = jit::jit(foo, {.executors = {myex}});
  manual_seed(0);
  Tensor a = Tensor::randn({2, 2}), b = Tensor::randn({2, 2});
  std::vector<Tensor> r = cfoo({a, b, a, b});
  CHECK(calls == 1);
  CHECK(max_abs_diff(r[0], mul(a, b)) == 0.0);
  CHECK(max_abs_diff(r[1], mul(a, b)) == 0.0);
  std::string s = jit::last_traces(cfoo).back().str();
  CHECK(s.find("(t0, t1) = multimul(t_0, t_1, t_2, t_3)") != std::string::npos);
  CHECK(s.find("(t0, t1) = multimul(t_0, t_1, t_2, t_3)\n    # t0 = prims.mul(t_0, t_1)  # t0: \"cpu f32[2, 2]\"\n"
               "    # t1 = prims.mul(t_2, t_3)") != std::string::npos);
  CHECK(s.find("cpuFusion") == std::string::npos);

  // Its grad comes from the like-function, checked against finite differences.
  auto g = jit::grad(cfoo);
  std::vector<Tensor> grads = g({a, b, a, b});
  REQUIRE(grads.size() == 4);
  CHECK(max_abs_diff(grads[0], b) < 1e-6);
  CHECK(max_abs_diff(grads[1], a) < 1e-6);
  // Called eagerly with gradients, it runs its like-function, which autograd differentiates.
  Tensor ea = a.clone().requires_grad_(true), eb = b.clone().requires_grad_(true);
  std::vector<Tensor> er = multimul(ea, eb, ea, eb);
  add(sum(er[0]), sum(er[1])).backward();
  CHECK(max_abs_diff(ea.grad(), mul(b, 2.0)) < 1e-6);
  CHECK(max_abs_diff(eb.grad(), mul(a, 2.0)) < 1e-6);
}

TEST_CASE("executors: an implementation with a checker and an execution transform claims mul") {
  OperatorExecutor myex("myex_b", "0.1");
  auto multimul = myex.register_operator("multimul", {.like = multimul_like, .fn = multimul_impl});
  myex.register_implementation(OpId::mul, {.checker = all_cpu, .execution_transform = [&](const std::vector<Value>& v) {
                                             return std::vector<Tensor>{multimul(v[0], v[1], 0, 0)[0]};
                                           }});
  auto cbar = jit::jit(mul_fn, {.executors = {myex}});
  manual_seed(1);
  Tensor a = Tensor::randn({2, 2}), b = Tensor::randn({2, 2});
  CHECK(max_abs_diff(cbar({a, b})[0], mul(a, b)) == 0.0);
  std::string s = jit::last_traces(cbar).back().str();
  CHECK(s.find("= multimul(t_0, t_1, 0, 0)") != std::string::npos);
  // The second output is never read: it prints as `_`, without its decomposition line.
  CHECK(s.find("(t0, _) = multimul(t_0, t_1, 0, 0)") != std::string::npos);
  CHECK(s.find("prims.full") == std::string::npos);

  // Execution transforms run after grad: the backward's muls become multimuls too.
  auto g = jit::grad(cbar);
  std::vector<Tensor> grads = g({a, b});
  CHECK(max_abs_diff(grads[0], b) < 1e-6);
  CHECK(max_abs_diff(grads[1], a) < 1e-6);
  std::string gs = jit::last_traces(g).back().str();
  size_t first = gs.find("= multimul(");
  REQUIRE(first != std::string::npos);
  CHECK(gs.find("= multimul(", first + 1) != std::string::npos);
  CHECK(gs.find("prims.full((2, 2), 1.0") != std::string::npos);

  // A grad transform replaces mul's VJP: one multimul computes both gradients.
  myex.register_implementation(
      OpId::mul, {.checker = all_cpu,
                  .execution_transform = [&](const std::vector<Value>& v) {
                    return std::vector<Tensor>{multimul(v[0], v[1], 0, 0)[0]};
                  },
                  .grad_transform = [&](const std::vector<Value>& in) {
                    Tensor fwd = mul(in[0].tensor, in[1]);
                    Tensor g = jit::get_grad(fwd);
                    std::vector<Tensor> ab = multimul(in[1], g, in[0], g);
                    jit::put_grads({in[0].tensor, in[1].tensor}, ab);
                    return std::vector<Tensor>{fwd};
                  }});
  auto g2 = jit::grad(jit::jit(mul_fn, {.executors = {myex}}));
  grads = g2({a, b});
  CHECK(max_abs_diff(grads[0], b) < 1e-6);
  CHECK(max_abs_diff(grads[1], a) < 1e-6);
  std::string g2s = jit::last_traces(g2).back().str();
  first = g2s.find("= multimul(");
  REQUIRE(first != std::string::npos);
  CHECK(g2s.find("= multimul(", first + 1) == std::string::npos);

  // A checker that says no leaves mul to the built-in executors.
  OperatorExecutor picky("picky_b", "0.1");
  picky.register_implementation(OpId::mul, {.checker = [](const std::vector<Value>&) { return false; },
                                            .execution_transform = [&](const std::vector<Value>& v) {
                                              return std::vector<Tensor>{multimul(v[0], v[1], 0, 0)[0]};
                                            }});
  auto cpicky = jit::jit(mul_fn, {.executors = {picky}});
  cpicky({a, b});
  CHECK(jit::last_traces(cpicky).back().str().find("multimul") == std::string::npos);
}

TEST_CASE("executors: a transform may add ops of its own, run by the built-in executors") {
  OperatorExecutor myex("myex_c", "0.1");
  auto multimul = myex.register_operator("multimul", {.like = multimul_like, .fn = multimul_impl});
  myex.register_implementation(OpId::mul, {.checker = all_cpu, .execution_transform = [&](const std::vector<Value>& v) {
                                             Tensor a = v[0].tensor.contiguous(), b = v[1].tensor.contiguous();
                                             return std::vector<Tensor>{multimul(a, b, 0, 0)[0]};
                                           }});
  auto caz = jit::jit(mul_fn, {.executors = {myex}});
  Tensor a = Tensor::randn({3, 2}).t(), b = Tensor::randn({2, 3});
  CHECK(max_abs_diff(caz({a, b})[0], mul(a, b)) == 0.0);
  std::string s = jit::last_traces(caz).back().str();
  CHECK(s.find("prims.contiguous(t_0)") != std::string::npos);
  CHECK(s.find("= multimul(") != std::string::npos);
}

TEST_CASE("executors: priority order decides who claims an op") {
  OperatorExecutor first("first_d", "1"), second("second_d", "1");
  int first_calls = 0, second_calls = 0;
  auto op1 = first.register_operator("mul_first", {.like = [](const std::vector<Value>& v) {
                                                     return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                                   },
                                                   .fn = [&](const std::vector<Value>& v) {
                                                     ++first_calls;
                                                     return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                                   }});
  auto op2 = second.register_operator("mul_second", {.like = [](const std::vector<Value>& v) {
                                                       return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                                     },
                                                     .fn = [&](const std::vector<Value>& v) {
                                                       ++second_calls;
                                                       return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                                     }});
  first.register_implementation(OpId::mul, {.execution_transform = [&](const std::vector<Value>& v) { return op1(v[0], v[1]); }});
  second.register_implementation(OpId::mul, {.execution_transform = [&](const std::vector<Value>& v) { return op2(v[0], v[1]); }});
  Tensor a = Tensor::ones({2}), b = Tensor::full({2}, 3.0);
  auto j12 = jit::jit(mul_fn, {.executors = {first, second}});
  auto j21 = jit::jit(mul_fn, {.executors = {second, first}});
  CHECK(j12({a, b})[0].to_vector<float>() == std::vector<float>{3, 3});
  CHECK(first_calls == 1);
  CHECK(second_calls == 0);
  j21({a, b});
  CHECK(second_calls == 1);
  CHECK(first_calls == 1);
  CHECK(jit::last_traces(j21).back().str().find("mul_second(") != std::string::npos);
}

TEST_CASE("executors: mistakes are clear errors that name the executor and the op") {
  OperatorExecutor myex("myex_e", "0.1");
  // An implementation whose outputs do not match the like-function.
  auto bad = myex.register_operator("badmul", {.like = multimul_like, .fn = [](const std::vector<Value>&) {
                                                 return std::vector<Tensor>{Tensor::zeros({5}), Tensor::zeros({5})};
                                               }});
  auto jbad = jit::jit([&](const std::vector<Tensor>& x) { return bad(x[0], x[0], x[0], x[0]); }, {.executors = {myex}});
  CHECK_THROWS_WITH_AS(jbad({Tensor::ones({2, 2})}), doctest::Contains("myex_e: badmul output 0 is"), volt::Error);

  // A checker that throws.
  OperatorExecutor throws("throws_e", "0.1");
  throws.register_implementation(OpId::mul, {.checker = [](const std::vector<Value>&) -> bool {
                                               throw std::runtime_error("cannot decide");
                                             },
                                             .execution_transform = [](const std::vector<Value>& v) {
                                               return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                             }});
  auto jt = jit::jit(mul_fn, {.executors = {throws}});
  CHECK_THROWS_WITH_AS(jt({Tensor::ones({2}), Tensor::ones({2})}),
                       doctest::Contains("throws_e: the checker for mul threw: cannot decide"), volt::Error);

  // A grad transform that puts no gradient.
  OperatorExecutor lazy_grad("nograd_e", "0.1");
  lazy_grad.register_implementation(OpId::mul, {.grad_transform = [](const std::vector<Value>& v) {
                                                  return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                                }});
  auto jg = jit::grad(jit::jit(mul_fn, {.executors = {lazy_grad}}));
  CHECK_THROWS_WITH_AS(jg({Tensor::ones({2}), Tensor::ones({2})}),
                       doctest::Contains("mul: its grad transform put no gradient for input 0"), volt::Error);

  // Two executors with one name.
  {
    OperatorExecutor one("same_name_e", "1"), two("same_name_e", "2");
    jit::register_executor(one);
    CHECK_THROWS_WITH_AS(jit::register_executor(two), doctest::Contains("already registered"), volt::Error);
  }
  // Destroyed executors leave the registry: nothing dangles, and the name is free again.
  auto named = [](const std::string& n) {
    int k = 0;
    for (jit::Executor* e : jit::registered_executors()) k += e->name() == n;
    return k;
  };
  CHECK(named("same_name_e") == 0);
  {
    OperatorExecutor again("same_name_e", "3");
    jit::register_executor(again);
    CHECK(named("same_name_e") == 1);
    jit::unregister_executor(again);
    CHECK(named("same_name_e") == 0);
    jit::register_executor(again);
  }
  CHECK(named("same_name_e") == 0);

  // One executor, one operator per name: traces show operators by name.
  myex.register_operator("twice", {.like = multimul_like, .fn = multimul_impl});
  CHECK_THROWS_WITH_AS(myex.register_operator("twice", {.like = multimul_like, .fn = multimul_impl}),
                       doctest::Contains("myex_e: an operator named \"twice\" is already registered here"),
                       volt::Error);

  // register_operator needs exactly one of like and meta.
  CHECK_THROWS_WITH_AS(myex.register_operator("neither", {.fn = multimul_impl}),
                       doctest::Contains("needs exactly one of `like` and `meta`"), volt::Error);
}

TEST_CASE("executors: a prim declared by its meta function, with a registered gradient") {
  OperatorExecutor myex("myex_f", "0.1");
  auto square = myex.register_operator(
      "square", {.meta = [](const std::vector<Value>& v) {
                   return std::vector<TensorMeta>{{v[0].tensor.sizes(), v[0].tensor.dtype(), v[0].tensor.device()}};
                 },
                 .fn = [](const std::vector<Value>& v) { return std::vector<Tensor>{mul(v[0].tensor, v[0].tensor)}; },
                 .grad = [](const std::vector<Value>& in, const std::vector<Tensor>& g) {
                   return std::vector<Tensor>{mul(mul(g[0], in[0].tensor), 2.0)};
                 }});
  auto f = jit::jit([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{sum(square(x[0])[0])}; },
                    {.executors = {myex}});
  Tensor x = Tensor::from_vector<float>({1, -2, 3});
  CHECK(f(x).item<float>() == 14.0f);
  std::string s = jit::last_traces(f).back().str();
  CHECK(s.find("= square(t_0)") != std::string::npos);
  auto g = jit::value_and_grad(f);
  std::vector<Tensor> r = g(std::vector<Tensor>{x});
  REQUIRE(r.size() == 2);
  CHECK(r[0].item<float>() == 14.0f);
  CHECK(r[1].to_vector<float>() == std::vector<float>{2, -4, 6});
}

TEST_CASE("executors: a checker that accepts one layout is asked again when the layout changes") {
  OperatorExecutor myex("myex_layout", "0.1");
  int calls = 0;
  auto multimul = myex.register_operator(
      "multimul", {.like = multimul_like, .fn = [&](const std::vector<Value>& v) {
                     ++calls;
                     return multimul_impl(v);
                   }});
  auto contiguous_only = [](const std::vector<Value>& v) {
    for (const Value& x : v)
      if (x.is_tensor && !x.tensor.is_contiguous()) return false;
    return true;
  };
  myex.register_implementation(OpId::mul, {.checker = contiguous_only,
                                           .execution_transform = [&](const std::vector<Value>& v) {
                                             return std::vector<Tensor>{multimul(v[0], v[1], 0, 0)[0]};
                                           }});
  auto cmul = jit::jit(mul_fn, {.executors = {myex}});
  manual_seed(3);
  Tensor a = Tensor::randn({3, 3}), b = Tensor::randn({3, 3});
  CHECK(max_abs_diff(cmul({a, b})[0], mul(a, b)) == 0.0);
  CHECK(calls == 1);
  // Same shape, dtype and device, but a transposed view: the cached trace was
  // claimed for contiguous inputs only, so the call must trace again.
  Tensor at = a.t();
  REQUIRE_FALSE(at.is_contiguous());
  CHECK(max_abs_diff(cmul({at, b})[0], mul(at, b)) == 0.0);
  CHECK(jit::cache_misses(cmul) == 2);
  CHECK(calls == 1);
  CHECK(jit::last_traces(cmul).back().str().find("multimul") == std::string::npos);
  cmul({a, b});
  CHECK(jit::cache_hits(cmul) == 1);
  CHECK(calls == 2);
}
