#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <volt/autograd/node.h>
#include <volt/jit/jit.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;

namespace {

using volt::testing::max_rel_diff;

std::string final_trace(const jit::JitFunction& f) { return jit::last_traces(f).back().str(); }

}  // namespace

TEST_CASE("jit of a function matches eager and caches by metadata") {
  auto fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{add(mul(x[0], x[1]), exp(x[0]))}; };
  auto jf = jit::jit(fn, {"a", "b"});
  manual_seed(1);
  Tensor a = Tensor::randn({3, 4}), b = Tensor::randn({4});
  Tensor got = jf({a, b}).at(0);
  Tensor want = fn({a, b}).at(0);
  CHECK(max_rel_diff(got, want) < 1e-6);
  CHECK(jit::cache_misses(jf) == 1);
  CHECK(jf.last_miss_reason() == "first call");
  jf({Tensor::randn({3, 4}), Tensor::randn({4})});
  CHECK(jit::cache_hits(jf) == 1);
  jf({Tensor::randn({5, 4}), Tensor::randn({4})});
  CHECK(jit::cache_misses(jf) == 2);
  CHECK(jf.last_miss_reason().find("input0=cpu f32[5, 4]") != std::string::npos);

  std::string s = final_trace(jf);
  CHECK(s.find("def computation(a, b):") != std::string::npos);
  CHECK(s.find("# a: \"cpu f32[5, 4]\"") != std::string::npos);
  CHECK(s.find("prims.mul(a, b)") != std::string::npos);
  CHECK(s.find("prims.exp(a)") != std::string::npos);
  // One fused kernel for the mul, exp and add; its cost is reported pass by pass.
  auto st = jit::compile_stats(jf);
  CHECK(st.fusions == 1);
  CHECK(st.passes.size() == 6);
  CHECK(s.find("(t2,) = cpuFusion0(a, b)") != std::string::npos);
  // The kernel reads like the trace: the same names, one line per prim.
  auto sources = jit::last_kernel_sources(jf);
  REQUIRE(sources.size() == 1);
  CHECK(sources[0].find(" = (float)(((float)a) * ((float)b));") != std::string::npos);
  CHECK(sources[0].find("in_b[(i % 4LL)]") != std::string::npos);  // b broadcasts over rows
  CHECK(sources[0].find("out_t2[i] = t2;") != std::string::npos);
}

TEST_CASE("a one-input function called as f({x}) takes x as its one input, as f(x) does") {
  auto f = jit::jit([](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], 2.0), exp(x[0])}; },
                    {"x"});
  manual_seed(4);
  Tensor x = Tensor::randn({3, 5});
  const std::vector<Tensor> both = f({x});  // the inputs in a vector: both outputs
  REQUIRE(both.size() == 2);
  CHECK(both[0].sizes() == Shape{3, 5});
  CHECK(max_rel_diff(f({x})[0], f(x)) == 0);  // [0]: the first output, not its first row
  CHECK(max_rel_diff(both[1], exp(x)) < 1e-6);
  const Tensor& cx = x;
  CHECK(max_rel_diff(f(cx), mul(x, 2.0)) == 0);
}

TEST_CASE("the CSE pass merges repeated work and the DCE pass drops unused work") {
  auto fn = [](const std::vector<Tensor>& x) {
    Tensor unused = tanh(x[0]);
    (void)unused;
    return std::vector<Tensor>{add(exp(x[0]), exp(x[0]))};
  };
  auto jf = jit::jit(fn, {"x"});
  Tensor x = Tensor::from_vector<float>({0.5f, -1.0f});
  Tensor y = jf(x);
  CHECK(max_rel_diff(y, mul(exp(x), 2.0)) < 1e-6);
  const auto& traces = jit::last_traces(jf);
  REQUIRE(traces.size() == 6);  // tracing, DCE/CSE, claim, fusion, GEMM epilogues, delete-last-used
  std::string before = traces[0].str(), after = traces[1].str();
  CHECK(before.find("prims.tanh") != std::string::npos);
  CHECK(after.find("prims.tanh") == std::string::npos);
  size_t first = after.find("prims.exp");
  REQUIRE(first != std::string::npos);
  CHECK(after.find("prims.exp", first + 1) == std::string::npos);
}

TEST_CASE("jit of the seed MLP: traces like Thunder's and matches eager in train and eval") {
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(12, std::vector<int64_t>{12, 6, 3}, true, 0.1);
  auto jm = jit::jit(net);
  Tensor x = Tensor::rand({4, 12});
  Tensor target = Tensor::from_vector<int64_t>({0, 2, 1, 2});

  net->train();
  // Same generator state -> same dropout masks in eager and jit.
  PhiloxState st = rng_state();
  Tensor eager_loss = cross_entropy((*net)(x), target);
  eager_loss.backward();
  std::vector<Tensor> eager_grads;
  for (auto& p : net->parameters()) eager_grads.push_back(p.grad().clone());
  net->zero_grad();
  set_rng_state(st);
  Tensor jit_loss = cross_entropy(jm(x), target);
  CHECK(max_rel_diff(jit_loss, eager_loss) < 1e-5);
  jit_loss.backward();
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(max_rel_diff(params[i].grad(), eager_grads[i]) < 1e-5);

  std::string t0 = jit::last_traces(jm).front().str();
  CHECK(t0.find("def computation(_0_weight, _0_bias, _3_weight, _3_bias, _6_weight, _6_bias, input):") !=
        std::string::npos);
  CHECK(t0.find("t0 = volt.linear(input, _0_weight, _0_bias)  # t0: \"cpu f32[4, 12]\"") != std::string::npos);
  CHECK(t0.find("  # t0 = prims.linear(input, _0_weight, _0_bias)") != std::string::npos);
  CHECK(t0.find("= volt.relu(t0)") != std::string::npos);
  CHECK(t0.find("# t1 = prims.le(t0, 0.0)  # t1: \"cpu b8[4, 12]\"") != std::string::npos);
  CHECK(t0.find("prims.uniform((4, 12), 0.0, 1.0") != std::string::npos);
  CHECK(t0.find("prims.lt(") != std::string::npos);
  CHECK(t0.find("0.9)") != std::string::npos);
  CHECK(t0.find("prims.convert_element_type(") != std::string::npos);
  CHECK(t0.find("1.1111111111111112)") != std::string::npos);

  net->eval();
  NoGradGuard ng;
  Tensor e = (*net)(x);
  Tensor j = jm(x);
  CHECK(jit::cache_misses(jm) == 2);  // training flag and grad mode differ
  CHECK(max_rel_diff(j, e) < 1e-6);
  CHECK(final_trace(jm).find("prims.uniform") == std::string::npos);
}

TEST_CASE("jit reports a captured tensor clearly") {
  Tensor w = Tensor::ones({2});
  auto jf = jit::jit([w](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], w)}; }, {"x"});
  CHECK_THROWS_WITH_AS(jf(Tensor::ones({2})), doctest::Contains("not an input of the traced function"),
                       volt::Error);
}

TEST_CASE("jit grad: backward trace regenerates dropout masks and training tracks eager for 20 steps") {
  manual_seed(3);
  auto eager_net = std::make_shared<nn::MLP>(10, std::vector<int64_t>{16, 8, 4}, true, 0.1);
  manual_seed(3);
  auto jit_net = std::make_shared<nn::MLP>(10, std::vector<int64_t>{16, 8, 4}, true, 0.1);
  auto jm = jit::jit(jit_net);
  Tensor x = Tensor::randn({6, 10});
  Tensor target = Tensor::from_vector<int64_t>({0, 1, 2, 3, 0, 1});
  auto sgd_step = [](nn::Module& m) {
    NoGradGuard ng;
    for (auto& p : m.parameters()) {
      p.copy_(sub(p, mul(p.grad(), 0.05)));
    }
    m.zero_grad();
  };
  for (int step = 0; step < 20; ++step) {
    PhiloxState st = rng_state();
    cross_entropy((*eager_net)(x), target).backward();
    sgd_step(*eager_net);
    set_rng_state(st);
    cross_entropy(jm(x), target).backward();
    sgd_step(*jit_net);
  }
  CHECK(jit::cache_misses(jm) == 1);
  CHECK(jit::cache_hits(jm) == 19);
  auto pe = eager_net->parameters(), pj = jit_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_rel_diff(pj[i], pe[i]) < 1e-4);

  REQUIRE(jit::last_backward_traces(jm).size() == 5);  // grad, claim, fusion, GEMM epilogues, delete-last-used
  std::string fwd = jit::last_traces(jm).back().str();
  std::string bwd = jit::last_backward_traces(jm).front().str();
  std::string bwd_final = jit::last_backward_traces(jm).back().str();
  CHECK(fwd.find("# Constructed by Delete Last Used") != std::string::npos);
  // Each layer's bias, ReLU and dropout mask in its linear's store: one region
  // beginning with the linear, its product freed inside it.
  CHECK(fwd.find(") = cpuFusion0(input, _0_weight, _0_bias)\n    # t0 = volt.linear(input, _0_weight, _0_bias)") !=
        std::string::npos);
  for (const jit::BoundSymbol& b : jit::last_traces(jm).back().bsyms) CHECK(b.call.op != OpId::linear);
  CHECK(bwd_final.find("del [") != std::string::npos);
  CHECK(bwd_final.find("= cpuFusion") != std::string::npos);
  // Backward's fusions regenerate the masks inside the kernel.
  CHECK(bwd_final.find("    # t3 = prims.uniform((6, 16)") != std::string::npos);
  CHECK(fwd.find("def augmented_forward_fn(") != std::string::npos);
  CHECK(bwd.find("def backward_fn(") != std::string::npos);
  // The masks are regenerated from the same Philox counters, not saved.
  CHECK(bwd.find("prims.uniform((6, 16), 0.0, 1.0, device=cpu, dtype=f32, rng_offset=0)") != std::string::npos);
  CHECK(bwd.find("def backward_fn(saved_for_backward, cotangents):") != std::string::npos);
  size_t unpack = bwd.find(", = C0\n");
  REQUIRE(unpack != std::string::npos);
  std::string saved = bwd.substr(bwd.rfind('\n', unpack), unpack - bwd.rfind('\n', unpack));
  CHECK(saved.find("_0_weight") == std::string::npos);  // the first layer's weight is not needed
  CHECK(saved.find("input") != std::string::npos);      // its input is
}

TEST_CASE("without a usable C++ compiler the fused regions run prim by prim, with the same results") {
  ::setenv("VOLT_CXX", "/nonexistent/c++", 1);
  ::setenv("VOLT_KERNEL_CACHE", "/tmp/volt-test-no-compiler", 1);
  auto fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{sigmoid(mul(x[0], 3.0))}; };
  auto jf = jit::jit(fn, {"x"});
  Tensor x = Tensor::from_vector<float>({-1.0f, 0.25f, 2.0f});
  Tensor got = jf(x);
  ::unsetenv("VOLT_CXX");
  ::unsetenv("VOLT_KERNEL_CACHE");
  CHECK(max_rel_diff(got, sigmoid(mul(x, 3.0))) < 1e-7);
  CHECK(jit::compile_stats(jf).fusions == 1);
}

TEST_CASE("the kernel disk cache is keyed by the compiler's file: an upgraded compiler builds afresh") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("volt-test-cache-key-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The "compiler" is a script that runs the usual one.  Rewriting it in place
  // (same path, other contents) stands for a compiler upgrade: the same
  // source and flags must then not be served from the cache.
  const fs::path wrapper = dir / "cxx";
  const char* cxx = std::getenv("VOLT_CXX");
  auto write_wrapper = [&](const std::string& comment) {
    std::ofstream(wrapper) << "#!/bin/sh\n# " << comment << "\nexec " << (cxx ? cxx : "c++") << " \"$@\"\n";
    fs::permissions(wrapper, fs::perms::owner_all);
  };
  auto count_libraries = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".so";
    return n;
  };
  auto fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{add(mul(x[0], 0.5), 7.0)}; };
  Tensor x = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f});
  ::setenv("VOLT_KERNEL_CACHE", dir.c_str(), 1);
  ::setenv("VOLT_CXX", wrapper.c_str(), 1);
  write_wrapper("version 1");
  auto first = jit::jit(fn, {"x"});
  Tensor a = first(x);
  const int after_first = count_libraries();
  write_wrapper("version 2, a longer file");
  auto second = jit::jit(fn, {"x"});
  Tensor b = second(x);
  if (cxx) ::setenv("VOLT_CXX", cxx, 1);
  else ::unsetenv("VOLT_CXX");
  ::unsetenv("VOLT_KERNEL_CACHE");
  CHECK(after_first == 1);
  CHECK(count_libraries() == 2);
  CHECK(a.to_vector<float>() == std::vector<float>{7.5f, 8.0f, 8.5f});
  CHECK(b.to_vector<float>() == a.to_vector<float>());
  fs::remove_all(dir);
}

TEST_CASE("fusion merges elementwise work split by an unrelated op into one kernel") {
  // exp(x) and x * 2 read the same x; the matmul between them does not touch
  // either, so both land in one kernel that reads x once.
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor a = add(exp(in[0]), 1.0);
    Tensor m = matmul(in[1], in[1]);
    Tensor b = mul(in[0], 2.0);
    return std::vector<Tensor>{a, m, b};
  };
  auto jf = jit::jit(fn, {"x", "w"});
  Tensor x = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}), w = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  std::vector<Tensor> r = jf({x, w});
  CHECK(max_rel_diff(r[0], add(exp(x), 1.0)) < 1e-6);
  CHECK(max_rel_diff(r[2], mul(x, 2.0)) < 1e-6);
  CHECK(jit::compile_stats(jf).fusions == 1);
  std::string s = final_trace(jf);
  CHECK(s.find("= cpuFusion0(x)") != std::string::npos);
  CHECK(s.find("cpuFusion1") == std::string::npos);
  // A prim that needs the matmul's result cannot move before it: two kernels.
  auto dependent = [](const std::vector<Tensor>& in) {
    Tensor a = exp(in[0]);
    Tensor m = matmul(in[1], in[1]);
    return std::vector<Tensor>{a, add(m, 1.0), mul(in[0], 2.0)};
  };
  auto jd = jit::jit(dependent, {"x", "w"});
  jd({Tensor::ones({2, 2}), w});
  CHECK(final_trace(jd).find("cpuFusion1") != std::string::npos);
}
