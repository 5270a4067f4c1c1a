// The code generator (jit/codegen.h): keys made from the IR, one kernel per
// key, and the MNIST model's training step compiling each distinct kernel once.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <volt/jit/codegen.h>
#include <volt/jit/codegen_detail.h>
#include <volt/jit/executor.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;

namespace {

using volt::testing::max_rel_diff;

// The kernel of a one-region function, jitted with these input names, run on these inputs.
std::shared_ptr<const jit::FusedKernel> kernel_of(const jit::JitFunction::Fn& fn, const std::vector<std::string>& names,
                                                  const std::vector<Tensor>& inputs) {
  auto jf = jit::jit(fn, names);
  jf(inputs);
  auto ks = jit::last_kernels(jf);
  REQUIRE(ks.size() == 1);
  return ks[0];
}

}  // namespace

TEST_CASE("codegen: the MNIST model's training step: 10 fused regions, 4 kernels built, equal keys share one") {
  // The MNIST example's model; a dropout probability no other case uses, so
  // that this process has built none of these kernels before.
  auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.35);
  };
  auto net = make(), ref = make();
  auto jm = jit::jit(net);
  Tensor x = Tensor::rand({8, 784});
  Tensor y = Tensor::from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6});
  const jit::KernelStats before = jit::cpu_fusion_executor().kernel_stats();
  PhiloxState st = rng_state();
  Tensor loss = cross_entropy(jm(x), y);
  loss.backward();
  const jit::KernelStats after = jit::cpu_fusion_executor().kernel_stats();

  // Forward: one kernel for the four hidden layers' relu + dropout (their
  // lengths and Philox offsets are not in the kernel), one for the last
  // layer's dropout; backward the same two shapes of work.
  auto st_c = jit::compile_stats(jm);
  CHECK(st_c.fusions == 10);
  CHECK(st_c.kernels == 4);
  CHECK(after.kernels - before.kernels == 4);
  CHECK(after.shared - before.shared == 6);
  // Fused regions are their own kind of bound symbol; everything else is an op.
  int regions = 0;
  for (const std::vector<jit::Trace>* list : {&jit::last_traces(jm), &jit::last_backward_traces(jm)})
    for (const jit::BoundSymbol& b : list->back().bsyms) {
      CHECK(b.is_fusion() == static_cast<bool>(b.kernel));
      CHECK(b.is_fusion() == !b.fusion_name.empty());
      regions += b.is_fusion();
    }
  CHECK(regions == 10);
  std::map<std::string, jit::KernelFn> fn_of;
  std::set<jit::KernelFn> fns;
  std::vector<unsigned long long> bases;
  for (const auto& k : jit::last_kernels(jm)) {
    REQUIRE(static_cast<bool>(k->fn));
    auto [it, fresh] = fn_of.emplace(k->key, k->fn);
    CHECK((it->second == k->fn));  // an equal key runs the same function
    fns.insert(k->fn);
    bases.push_back(k->rng_base);
  }
  CHECK(fns.size() == 4);
  // Each region's draws start where the program's counters say.
  REQUIRE(bases.size() == 10);
  CHECK(std::vector<unsigned long long>(bases.begin(), bases.begin() + 5) ==
        std::vector<unsigned long long>{0, 6272, 12544, 18816, 19040});

  // The same numbers as eager mode with the same masks.
  set_rng_state(st);
  Tensor want = cross_entropy((*ref)(x), y);
  want.backward();
  CHECK(max_rel_diff(loss, want) < 1e-5);
  auto p = net->parameters(), q = ref->parameters();
  for (size_t i = 0; i < p.size(); ++i) CHECK(max_rel_diff(p[i].grad(), q[i].grad()) < 1e-4);
}

TEST_CASE("codegen: a key holds what a region computes, and nothing the trace merely names") {
  auto f = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{add(mul(v[0], 2.0), 1.0)}; };
  auto g = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{sub(mul(v[0], 2.0), 1.0)}; };
  auto h = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{add(v[0], v[1])}; };
  Tensor x5 = Tensor::randn({5}), x7 = Tensor::randn({7}), a = Tensor::randn({4, 3});
  auto k_x5 = kernel_of(f, {"x"}, {x5});
  auto k_y7 = kernel_of(f, {"y"}, {x7});
  // Other names, another length: the same kernel, read with each trace's names.
  CHECK(k_x5->key == k_y7->key);
  CHECK(k_x5->symbol == k_y7->symbol);
  CHECK((k_x5->fn == k_y7->fn));
  CHECK(k_x5->source.find("in_x[i]") != std::string::npos);
  CHECK(k_y7->source.find("in_y[i]") != std::string::npos);
  CHECK(k_x5->key.find("in_v0[i]") != std::string::npos);
  // Another op, another dtype, another broadcast: another kernel.
  CHECK(kernel_of(g, {"x"}, {x5})->key != k_x5->key);
  CHECK(kernel_of(f, {"x"}, {x5.to(DType::f64)})->key != k_x5->key);
  auto k_row = kernel_of(h, {"a", "b"}, {a, Tensor::randn({3})});
  auto k_full = kernel_of(h, {"a", "b"}, {a, Tensor::randn({4, 3})});
  CHECK(k_row->key != k_full->key);
  // Adjacent dims read alike are one index: a row value across rows, a column bias, a plane.
  CHECK(jit::detail::index_expr({16, 4, 128, 1}, {16, 4, 128, 128}) == "(i / 128LL)");
  CHECK(jit::detail::index_expr({4, 1, 3}, {4, 5, 3}) == "(i / 15LL) * 3LL + (i % 3LL)");
  CHECK(jit::detail::index_expr({1, 5, 1}, {4, 5, 3}) == "((i / 3LL) % 5LL)");
  CHECK(jit::detail::index_expr({2, 1, 1, 7}, {2, 1, 6, 7}, "r") == "(r / 42LL) * 7LL + (r % 7LL)");
  CHECK(k_row->key.find("in_v1[(i % 3LL)]") != std::string::npos);
  // Both devices compile the same function: the CUDA source is its prelude and the body.
  CHECK(jit::cuda_source(*k_x5) == jit::cuda_prelude() + k_x5->body);
  CHECK(jit::host_source({k_x5.get()}).find(k_x5->body) != std::string::npos);
  CHECK(k_x5->body.find("VOLT_KERNEL(" + k_x5->symbol + ")") == 0);
}

TEST_CASE("codegen: every elementwise prim in a fused kernel gives the eager kernel's bits (f32, f64, i64)") {
  // One function applies every unary, binary and comparison prim to (x, y):
  // one fused region, so one generated kernel per dtype against the CPU's
  // eager kernels, which call the same op-table expressions.
  auto all_ops = [](const std::vector<Tensor>& v) {
    const Tensor &x = v[0], &y = v[1];
    return std::vector<Tensor>{neg(x),          abs(x),          exp(x),          log(x),          sqrt(x),
                               rsqrt(x),        tanh(x),         sigmoid(x),      reciprocal(x),   logical_not(x),
                               add(x, y),       sub(x, y),       mul(x, y),       div(x, y),       pow(x, y),
                               maximum(x, y),   minimum(x, y),   logical_and(x, y), logical_or(x, y), eq(x, y),
                               ne(x, y),        lt(x, y),        le(x, y),        gt(x, y),        ge(x, y),
                               where(gt(x, y), x, y)};
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs = {-2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 7.25, inf, -inf, nan, 2.0, -0.0};
  const std::vector<double> ys = {1.5, -1.0, 0.0, 2.0, nan, -3.0, 7.25, 1.0, -inf, 0.5, 10.0, 0.0};
  for (DType d : {DType::f32, DType::f64, DType::i64}) {
    INFO(dtype_name(d));
    const size_t n = is_floating(d) ? xs.size() : 7;  // integers: the finite values, truncated
    Tensor x = Tensor::from_vector<double>(std::vector<double>(xs.begin(), xs.begin() + n)).to(d);
    std::vector<double> yv(ys.begin(), ys.begin() + n);
    if (!is_floating(d))
      for (double& v : yv)
        if (std::isnan(v)) v = 4.0;  // NaN has no integer value (it would convert to INT64_MIN)
    Tensor y = Tensor::from_vector<double>(yv).to(d);
    if (!is_floating(d)) y = add(abs(y), 1);  // no division by zero, no negative powers of integers
    auto jf = jit::jit(all_ops, {"x", "y"});
    std::vector<Tensor> got = jf({x, y}), want = all_ops({x, y});
    REQUIRE(jit::compile_stats(jf).fusions == 1);
    REQUIRE(static_cast<bool>(jit::last_kernels(jf).at(0)->fn));
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("output " << k);
      REQUIRE(got[k].dtype() == want[k].dtype());
      std::vector<double> g = got[k].to(DType::f64).to_vector<double>(), w = want[k].to(DType::f64).to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("element " << i << ": " << g[i] << " vs " << w[i]);
        CHECK(((std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i]));
      }
    }
  }
}

TEST_CASE("codegen: a generated dropout kernel draws eager's mask at any length and counter offset (f32, f64)") {
  // Lengths around the vector widths (a remainder past the last full vector)
  // and past the bound where the kernel also splits over threads; the draw
  // starts at an odd counter offset.  Reference: element i is kept when
  // philox_uniform(seed, offset, i) < 1 - p, the rule the eager op follows.
  const double p = 0.3;
  auto drop = [p](const std::vector<Tensor>& v) { return std::vector<Tensor>{volt::dropout(mul(v[0], 2.0), p, true)}; };
  for (DType d : {DType::f32, DType::f64})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1003), int64_t(70001)}) {
      INFO(dtype_name(d) << ", " << n << " elements");
      Tensor x = Tensor::ones({n}, d);
      manual_seed(11);
      Tensor::rand({5});  // the draw under test starts at counter 5
      const PhiloxState st = rng_state();
      REQUIRE(st.offset == 5);
      Tensor want = volt::dropout(mul(x, 2.0), p, true);
      set_rng_state(st);
      auto jf = jit::jit(drop, {"x"});
      Tensor got = jf(x);
      REQUIRE(jit::compile_stats(jf).fusions == 1);
      REQUIRE(static_cast<bool>(jit::last_kernels(jf).at(0)->fn));
      CHECK(rng_state().offset == st.offset + uint64_t(n));
      const std::vector<double> g = got.to(DType::f64).to_vector<double>(), w = want.to(DType::f64).to_vector<double>();
      const double kept = d == DType::f32 ? double(float(2.0) * float(1.0 / (1.0 - p))) : 2.0 / (1.0 - p);
      int64_t mismatches = 0, eager_mismatches = 0, kept_count = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = d == DType::f32 ? philox_uniform(st.seed, st.offset, uint64_t(i)) < float(1.0 - p)
                                          : philox_uniform_f64(st.seed, st.offset, uint64_t(i)) < 1.0 - p;
        kept_count += keep;
        mismatches += (g[size_t(i)] != 0.0) != keep || g[size_t(i)] != w[size_t(i)];
        eager_mismatches += (w[size_t(i)] != 0.0) != keep || (keep && std::abs(w[size_t(i)] - kept) > 1e-6 * kept);
      }
      CHECK(mismatches == 0);
      CHECK(eager_mismatches == 0);
      if (n > 1000) CHECK(std::abs(double(kept_count) / double(n) - (1.0 - p)) < 0.05);
    }
}
