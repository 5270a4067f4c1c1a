// The pass "cuBLASLt activation epilogue" (jit/cuda/lt_activation.cpp): a
// linear followed by relu or gelu(x, "tanh") as one cuBLASLt call in the
// jit's trace, never the exact gelu nor a pre-activation read elsewhere; the
// numbers against the CPU (f32) or an f64 reference of the 16-bit inputs;
// a training step's gradients through the fused forward against the CPU's,
// in the module jit and in compile_step.  Under autocast:
// test_cublaslt_autocast_gelu.cpp.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/lazy/lazy.h>
#include <volt/tensor/factories.h>

#include "cuda/cublaslt_tests.h"

using namespace volt;
using volt::testing::count_of;
using volt::testing::max_abs_diff;

namespace {

const Device kGPU = Device::cuda(0);

std::vector<Tensor> on_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.to(kGPU));
  return r;
}

// |got - want| within one rounding of the 16-bit output (2^-8 of |want| for
// bf16, 2^-11 for f16) plus 1e-4 for the f32 sums of 33 products; f32: the
// CPU's order of summation against the simulator's f64 one, 1e-5 + 2e-6 k.
// `units` scales the 16-bit part: cuBLASLt's GELU epilogue on an H200 was up to
// 2.9 units of the 16-bit type from f64 with split-k sums in that type, which
// volt no longer allows (tensor/cuda/matmul_lt.cpp); its checks pass 4
// half-units and an absolute 4e-4.
bool close(const Tensor& got, const Tensor& want64, DType t, int64_t k, double units = 1.0) {
  const std::vector<double> g = got.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> w = want64.contiguous().to_vector<double>();
  if (g.size() != w.size()) return false;
  const double rel = units * (t == DType::bf16 ? std::ldexp(1.0, -8) : t == DType::f16 ? std::ldexp(1.0, -11) : 0.0);
  const double abs = t == DType::f32 ? 1e-5 + 2e-6 * static_cast<double>(k) : 1e-4 * units;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= rel * std::fabs(w[i]) + abs)) {
      MESSAGE("element " << i << ": got " << g[i] << ", want " << w[i]);
      return false;
    }
  return true;
}

// x (.., k), w (n, k), b (n) in dtype t; the f64 reference of the rounded values.
struct Layer {
  Tensor x, w, b;
  Tensor x64() const { return x.to(DType::f64); }
  Tensor w64() const { return w.to(DType::f64); }
  Tensor b64() const { return b.to(DType::f64); }
};

Layer layer(DType t, const Shape& xs, int64_t n) {
  const int64_t k = xs.back();
  return {Tensor::randn(xs).to(t), Tensor::randn({n, k}).to(t), Tensor::randn({n}).to(t)};
}

}  // namespace

TEST_CASE("cuda: the jit takes linear then relu into one cuBLASLt call (RELU_BIAS, or RELU without a bias)") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0): the pass leaves the trace as it is");
  }
  manual_seed(41);
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (bool bias : {true, false})
      for (const Shape& xs : {Shape{8, 33}, Shape{2, 3, 33}}) {
        INFO(dtype_name(t) << (bias ? " with" : " without") << " bias, x of " << xs.size() << " dims");
        const Layer l = layer(t, xs, 17);
        auto f = jit::jit([bias](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{relu(linear(in[0], in[1], bias ? in[2] : Tensor()))};
        });
        const std::vector<Tensor> args = on_gpu({l.x, l.w, l.b});
        (void)f(args);  // traces and compiles
        cuda::synchronize(0);
        const cuda::LaunchCounts before = cuda::launch_counts();
        Tensor got = f(args)[0];
        const cuda::LaunchCounts after = cuda::launch_counts();
        const std::string trace = jit::last_traces(f).back().str();
        INFO(trace);
        CHECK(count_of(trace, "= cublas_linear_relu(") == 1);
        CHECK(count_of(trace, "cublas_linear(") == 0);
        CHECK(count_of(trace, "nvrtcFusion") == 0);
        CHECK(after.cublas_calls - before.cublas_calls == 1);
        CHECK(after.kernels - before.kernels == 0);  // no ReLU kernel, no bias broadcast
        Tensor want = relu(linear(l.x64(), l.w64(), bias ? l.b64() : Tensor()));
        CHECK(close(got, want, t, 33));
      }
}

// An input cuBLASLt is not given (a view 4 bytes into its storage: not at
// the 256-byte alignment the plans assume) runs the two calls the line
// replaced: the linear, then the activation's own kernel.
TEST_CASE("cuda: the fused line falls back to linear and the activation where cuBLASLt declines the operands") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(47);
  Tensor wide = Tensor::randn({8, 34}), w = Tensor::randn({17, 33}), b = Tensor::randn({17});
  for (const char* act : {"relu", "gelu"}) {
    INFO(act);
    const bool relu_act = std::string(act) == "relu";
    auto f = jit::jit([relu_act](const std::vector<Tensor>& in) {
      Tensor y = linear(in[0].narrow(1, 1, 33), in[1], in[2]);
      return std::vector<Tensor>{relu_act ? relu(y) : gelu(y, "tanh")};
    });
    const std::vector<Tensor> args = on_gpu({wide, w, b});
    (void)f(args);
    cuda::synchronize(0);
    const cuda::LaunchCounts before = cuda::launch_counts();
    Tensor got = f(args)[0];
    const cuda::LaunchCounts after = cuda::launch_counts();
    const std::string trace = jit::last_traces(f).back().str();
    INFO(trace);
    CHECK(count_of(trace, relu_act ? "= cublas_linear_relu(" : "= cublas_linear_gelu(") == 1);
    CHECK(after.cublas_calls - before.cublas_calls == 1);
    CHECK(after.kernels - before.kernels >= 1);  // the activation (and the bias broadcast) as kernels
    Tensor y = linear(wide.to(DType::f64).narrow(1, 1, 33), w.to(DType::f64), b.to(DType::f64));
    CHECK(close(got, relu_act ? relu(y) : gelu(y, "tanh"), DType::f32, 33));
  }
}

TEST_CASE("cuda: the jit takes gelu(x, 'tanh') after a linear into GELU_BIAS, never the exact gelu") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(42);
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const char* approximate : {"tanh", "none"}) {
      INFO(dtype_name(t) << " gelu approximate=" << approximate);
      const bool tanh_form = std::string(approximate) == "tanh";
      const Layer l = layer(t, {8, 33}, 17);
      auto f = jit::jit([approximate](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{gelu(linear(in[0], in[1], in[2]), approximate)};
      });
      Tensor got = f(on_gpu({l.x, l.w, l.b}))[0];
      const std::string trace = jit::last_traces(f).back().str();
      INFO(trace);
      // cuBLASLt's GELU is the tanh approximation: the exact one stays a linear and its kernel.
      CHECK(count_of(trace, "= cublas_linear_gelu(") == (tanh_form ? 1u : 0u));
      CHECK(count_of(trace, "= cublas_linear(") == (tanh_form ? 0u : 1u));
      if (!tanh_form) {
        // The unfused layer (16-bit: each prim of the exact gelu rounds; compared in f32 only).
        if (t == DType::f32) CHECK(close(got, gelu(linear(l.x64(), l.w64(), l.b64()), "none"), t, 33));
        continue;
      }
      // GELU's slope is below 1.13, so the f32 slack holds; 16-bit: rounded once.
      CHECK(close(got, gelu(linear(l.x64(), l.w64(), l.b64()), "tanh"), t, 33, 4.0));
    }
}

TEST_CASE("cuda: a pre-activation with another reader keeps its linear and activation apart") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(43);
  const Layer l = layer(DType::f32, {8, 33}, 17);
  auto returned = jit::jit([](const std::vector<Tensor>& in) {
    Tensor y = linear(in[0], in[1], in[2]);
    return std::vector<Tensor>{relu(y), y};
  });
  auto read_twice = jit::jit([](const std::vector<Tensor>& in) {
    Tensor y = linear(in[0], in[1], in[2]);
    return std::vector<Tensor>{add(gelu(y, "tanh"), mul(y, 2.0))};
  });
  const std::vector<Tensor> args = on_gpu({l.x, l.w, l.b});
  std::vector<Tensor> a = returned(args);
  Tensor b = read_twice(args)[0];
  for (const jit::JitFunction* f : {&returned, &read_twice}) {
    const std::string trace = jit::last_traces(*f).back().str();
    INFO(trace);
    CHECK(count_of(trace, "cublas_linear_relu(") == 0);
    CHECK(count_of(trace, "cublas_linear_gelu(") == 0);
    CHECK(count_of(trace, "= cublas_linear(") == 1);
  }
  Tensor y = linear(l.x64(), l.w64(), l.b64());
  CHECK(close(a[0], relu(y), DType::f32, 33));
  CHECK(close(a[1], y, DType::f32, 33));
  CHECK(close(b, add(gelu(y, "tanh"), mul(y, 2.0)), DType::f32, 33));
}

namespace {

// relu(x W1^T [+ b1]) -> gelu_tanh(h W2^T [+ b2]) -> h W3^T + b3: the first
// layer with a bias and the second without, or the other way round.
std::vector<Tensor> three_layers(const std::vector<Tensor>& p, bool first_bias) {
  Tensor h = relu(linear(p[0], p[1], first_bias ? p[2] : Tensor()));
  h = gelu(linear(h, p[3], first_bias ? Tensor() : p[4]), "tanh");
  return {linear(h, p[5], p[6])};
}

// x, W1, b1, W2, b2, W3, b3 (f32, CPU).
std::vector<Tensor> three_layer_params() {
  return {Tensor::randn({2, 4, 33}), mul(Tensor::randn({40, 33}), 0.2), Tensor::randn({40}),
          mul(Tensor::randn({24, 40}), 0.2), Tensor::randn({24}), mul(Tensor::randn({5, 24}), 0.2),
          Tensor::randn({5})};
}

}  // namespace

TEST_CASE("cuda: gradients through the fused ReLU and GELU forward (module jit) equal the CPU's") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(44);
  for (bool first_bias : {true, false}) {
    INFO((first_bias ? "ReLU with a bias, GELU without" : "ReLU without a bias, GELU with one"));
    const std::vector<Tensor> p = three_layer_params();
    Tensor r = Tensor::randn({2, 4, 5});
    // The CPU, eagerly: sum(f(x) * r) and its gradients.
    std::vector<Tensor> cpu;
    for (const Tensor& t : p) cpu.push_back(t.detach().requires_grad_(true));
    Tensor cpu_out = three_layers(cpu, first_bias)[0];
    sum(mul(cpu_out, r)).backward();
    // The GPU, through the jit: the forward's two activations in the GEMMs.
    std::vector<Tensor> gpu;
    for (const Tensor& t : p) gpu.push_back(t.to(kGPU).requires_grad_(true));
    auto f = jit::jit([first_bias](const std::vector<Tensor>& in) { return three_layers(in, first_bias); });
    Tensor gpu_out = f(gpu)[0];
    sum(mul(gpu_out, r.to(kGPU))).backward();
    const std::string fwd = jit::last_traces(f).back().str(), bwd = jit::last_backward_traces(f).back().str();
    INFO(fwd);
    INFO(bwd);
    CHECK(count_of(fwd, "= cublas_linear_relu(") == 1);
    // With a gradient the GELU keeps its pre-activation (GELU_AUX[_BIAS]) for the backward.
    CHECK(count_of(fwd, "= cublas_linear_gelu_aux(") == 1);
    CHECK(count_of(fwd, "= cublas_linear(") == 1);
    // f32, about 40 products per sum in either order: 1e-4 of the values' scale.
    CHECK(max_abs_diff(gpu_out.detach().to(Device::cpu()), cpu_out.detach()) < 1e-4);
    for (size_t i = 1; i < p.size(); ++i) {
      CAPTURE(i);
      if (!cpu[i].grad().defined()) continue;  // the bias the function does not read
      REQUIRE(gpu[i].grad().defined());
      CHECK(max_abs_diff(gpu[i].grad().to(Device::cpu()), cpu[i].grad()) < 1e-4);
    }
    CHECK(max_abs_diff(gpu[0].grad().to(Device::cpu()), cpu[0].grad()) < 1e-4);
  }
}

namespace {

struct MlpSteps {
  std::vector<Tensor> params;  // on the CPU
  std::string trace;
  size_t nodes = 0;
};

// A 33 -> 40 -> 24 -> 10 MLP with ReLU, no dropout, SGD: three compiled
// steps on `device`, with the activation pass or without it.
MlpSteps mlp_steps(Device device, bool pass = true) {
  manual_seed(5);
  auto net = std::make_shared<nn::MLP>(33, std::vector<int64_t>{40, 24, 10}, true, 0.0);
  net->to(device);
  nn::SGD opt(net->parameters(), {.lr = 0.1});
  manual_seed(6);
  Tensor x = Tensor::randn({8, 33}).to(device), r = Tensor::randn({8, 10}).to(device);
  jit::StepOptions options{.state = {*net, opt}};
  if (!pass) options.jit.pipeline.without = {"cuBLASLt activation epilogue"};
  auto step = jit::compile_step(
      [&](const Tensor& in, const Tensor& target) {
        Tensor loss = sum(mul(net->forward(in), target));
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      std::move(options));
  for (int i = 0; i < 3; ++i) (void)step(x, r);
  MlpSteps s;
  for (const Tensor& p : net->parameters()) s.params.push_back(p.detach().to(Device::cpu()));
  s.trace = step.last_trace_str();
  s.nodes = step.graph_kernel_nodes();
  return s;
}

}  // namespace

// The recorded relu's mask (le) moves into the backward's region: the
// forward keeps no kernel for either ReLU, two graph nodes fewer.
TEST_CASE("cuda: compile_step takes the recorded relu (le, where) into the linear and trains as the CPU") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  MlpSteps cpu = mlp_steps(Device::cpu());
  MlpSteps gpu = mlp_steps(kGPU);
  MlpSteps plain = mlp_steps(kGPU, false);
  INFO(gpu.trace);
  CHECK(count_of(gpu.trace, "= cublas_linear_relu(") == 2);
  CHECK(count_of(gpu.trace, "= cublas_linear(") == 1);
  const std::string forward = gpu.trace.substr(0, gpu.trace.find("# ---- loss ----"));
  CHECK(count_of(forward, "nvrtcFusion") == 0);
  CHECK(count_of(plain.trace, "= cublas_linear(") == 3);
  REQUIRE(cpu.params.size() == gpu.params.size());
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    CAPTURE(i);
    // f32, three SGD steps: the GEMMs' orders of summation differ.
    CHECK(max_abs_diff(gpu.params[i], cpu.params[i]) < 1e-4);
    CHECK(max_abs_diff(plain.params[i], cpu.params[i]) < 1e-4);
  }
  if (cuda::simulated_counters()) {
    CHECK(plain.nodes - gpu.nodes == 2);
  }
  MESSAGE("compile_step graph nodes: " << gpu.nodes << " (" << plain.nodes << " without the pass)");
}

// The lazy device compiles its graphs by the same pipeline: a recorded
// linear and relu (no gradient) become one line there too.
TEST_CASE("cuda: the lazy device's CUDA backend takes linear then relu into one cuBLASLt call") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(45);
  lazy::mark_step();
  lazy::clear_cache();
  Tensor x = Tensor::randn({8, 33}), w = Tensor::randn({17, 33}), b = Tensor::randn({17});
  lazy::set_backend(kGPU);
  Tensor got = relu(linear(x.to(kLazy), w.to(kLazy), b.to(kLazy)));
  lazy::mark_step();
  const std::string trace = lazy::last_compiled_traces().back().str();
  Tensor host = got.to(Device::cpu());
  lazy::set_backend(Device::cpu());
  INFO(trace);
  CHECK(count_of(trace, "= cublas_linear_relu(") == 1);
  CHECK(count_of(trace, "cublas_linear(") == 0);
  CHECK(close(host, relu(linear(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64))), DType::f32, 33));
}
#endif  // VOLT_WITH_CUDA
