// The code generator (jit/codegen.h): keys made from the IR, one kernel per
// key, and the MNIST model's training step compiling each distinct kernel once.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>

#include <volt/jit/codegen.h>
#include <volt/jit/executor.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to(DType::f64).contiguous().to_vector<double>(),
                      y = b.to(DType::f64).contiguous().to_vector<double>();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]) / (1e-6 + std::abs(y[i])));
  return m;
}

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
  CHECK(k_row->key.find("in_v1[((i / 1LL) % 3LL) * 1LL]") != std::string::npos);
  // Both devices compile the same function: the CUDA source is its prelude and the body.
  CHECK(jit::cuda_source(*k_x5) == jit::cuda_prelude() + k_x5->body);
  CHECK(jit::host_source({k_x5.get()}).find(k_x5->body) != std::string::npos);
  CHECK(k_x5->body.find("VOLT_KERNEL(" + k_x5->symbol + ")") == 0);
}
