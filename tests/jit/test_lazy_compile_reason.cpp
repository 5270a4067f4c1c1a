// Why the lazy device compiled a graph, in words: the op, operand shape or
// dtype, attribute or size that differs from the last compiled graph.
#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include <volt/jit/lazy/lazy.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

// Runs f's graph on a lazy copy of x; returns the reason its compile gave ("hit" on a cache hit).
template <class F>
std::string compile(const Tensor& x, F f) {
  const int64_t before = lazy::metrics::counter_value("UncachedCompile");
  Tensor y = f(x.to(kLazy));
  lazy::sync({y});
  return lazy::metrics::counter_value("UncachedCompile") == before ? "hit" : lazy::last_compile_reason();
}

}  // namespace

TEST_CASE("lazy: a compile says which op, operand shape or dtype, or attribute changed") {
  lazy::mark_step();
  lazy::wait_device_ops();
  lazy::clear_cache();
  auto scale = [](const Tensor& t) { return (t * 2.0).sum({1}); };
  compile(Tensor::ones({4, 3}), scale);
  CHECK(compile(Tensor::ones({4, 3}), scale) == "hit");
  CHECK(compile(Tensor::ones({5, 3}), scale) == "mul (node 0): operand 0 has shape [5, 3], was [4, 3]");
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), scale) == "mul (node 0): operand 0 has dtype f64, was f32");
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), [](const Tensor& t) { return (t + 2.0).sum({1}); }) ==
        "node 0 is add, was mul");
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), [](const Tensor& t) { return (t + 2.0).sum({0}); }) ==
        "sum (node 1): dims=[0], was dims=[1]");
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), [](const Tensor& t) { return ((t + 2.0) * t).sum({0}); }) ==
        "node 1 is mul, was sum");
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), [](const Tensor& t) { return t.sum({0}); }) ==
        "node 0 is sum, was add");
  lazy::clear_cache();
  CHECK(compile(Tensor::ones({5, 3}, DType::f64), [](const Tensor& t) { return t.sum({0}); }) ==
        "the same graph as the last compiled one (it was dropped from the cache, or the cache was cleared)");
}

TEST_CASE("lazy: VOLT_LOG=lazy prints each compile with its reason") {
  lazy::mark_step();
  lazy::wait_device_ops();
  lazy::clear_cache();
  auto scale = [](const Tensor& t) { return (t * 2.0).sum({1}); };
  compile(Tensor::ones({4, 3}), scale);
  ::setenv("VOLT_LOG", "lazy", 1);
  std::ostringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  compile(Tensor::ones({4, 3}), scale);  // a hit: nothing printed
  compile(Tensor::ones({6, 3}), scale);
  std::cerr.rdbuf(old);
  ::unsetenv("VOLT_LOG");
  CHECK(captured.str() == "volt.lazy: compiling a graph of 2 nodes (mul (node 0): operand 0 has shape [6, 3], was [4, 3])\n");
}
