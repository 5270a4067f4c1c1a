// cuBLASLt's epilogues (tensor/cuda/matmul_lt.cpp, jit/cuda/lt_epilogue.cpp):
// linear's bias added by the GEMM, and a weight's gradient with its bias's in
// one GEMM, against the CPU; what they save in the seed MLP's training step;
// and the plain cuBLAS path where cuBLASLt is switched off (a child process
// with VOLT_CUBLASLT=0, since the library is opened once per process).
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unistd.h>

#include "cuda/cublaslt_tests.h"

using namespace volt;
using volt::testing::count_of;
using volt::testing::max_abs_diff;

namespace {

const Device kGPU = Device::cuda(0);

struct SeedStep {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU
  size_t nodes = 0;
  std::string trace;
  cuda::LaunchCounts jit_step{};  // one module-jit training step's launches (GPU only)
};

// The seed MLP (784 -> 784 -> 784 -> 784 -> 28 -> 10, dropout 0.1, Adam),
// batch 8: three compiled steps on `device`, then one module-jit step counted.
SeedStep seed_mlp_steps(Device device) {
  manual_seed(3);
  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
  net->to(device);
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto body = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = loss_fn(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile_step(body, {.state = {*net, opt}});
  manual_seed(11);
  Tensor x = Tensor::randn({8, 784}).to(device), y = Tensor::randint(0, 10, {8}).to(device);
  SeedStep r;
  for (int i = 0; i < 3; ++i) r.losses.push_back(step(x, y).item_double());
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().to(Device::cpu()));
  r.nodes = step.graph_kernel_nodes();
  r.trace = step.last_trace_str();
  if (device.is_cuda()) {
    auto jitted = jit::jit(net);
    auto jit_step = [&] {
      Tensor loss = loss_fn(jitted(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    };
    jit_step();  // traces and compiles
    cuda::synchronize(0);
    const cuda::LaunchCounts before = cuda::launch_counts();
    jit_step();
    const cuda::LaunchCounts after = cuda::launch_counts();
    r.jit_step = {after.kernels - before.kernels, after.cublas_calls - before.cublas_calls};
  }
  return r;
}

}  // namespace

TEST_CASE("cuda: linear's bias in cuBLASLt's epilogue is one call and matches the CPU") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0): linear takes cuBLAS's plain path");
  }
  manual_seed(21);
  for (auto [m, k, n] : {std::array<int64_t, 3>{8, 784, 784}, {5, 33, 17}, {1, 7, 3}, {64, 28, 10}}) {
    INFO("m " << m << " k " << k << " n " << n);
    Tensor x = Tensor::randn({m, k}), w = Tensor::randn({n, k}), b = Tensor::randn({n});
    Tensor want = linear(x, w, b);
    Tensor xg = x.to(kGPU), wg = w.to(kGPU), bg = b.to(kGPU);
    (void)linear(xg, wg, bg);  // the plan (descriptor, layouts, algorithm) made outside the count
    cuda::synchronize(0);
    const cuda::LaunchCounts before = cuda::launch_counts();
    Tensor got = linear(xg, wg, bg);
    const cuda::LaunchCounts after = cuda::launch_counts();
    CHECK(after.cublas_calls - before.cublas_calls == 1);
    CHECK(after.kernels - before.kernels == 0);  // no kernel broadcasting the bias first
    // Sums of k products of about unit size: f32 rounding of the CPU's order grows with k.
    const double tol = 1e-5 + 2e-6 * static_cast<double>(k);
    CHECK(max_abs_diff(got.to(Device::cpu()), want) < tol);
    // A transposed input is read in place (op T), not packed.
    Tensor xt = Tensor::randn({k, m});
    CHECK(max_abs_diff(linear(xt.to(kGPU).t(), wg, bg).to(Device::cpu()), linear(xt.t(), w, b)) < tol);
  }
}

TEST_CASE("cuda: a weight's and its bias's gradients in one cuBLASLt call (BGRADB) match the CPU") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(22);
  for (auto [m, n, k] : {std::array<int64_t, 3>{8, 784, 784}, {8, 10, 28}, {3, 5, 7}, {130, 17, 9}}) {
    INFO("m " << m << " n " << n << " k " << k);
    Tensor g = Tensor::randn({m, n}), x = Tensor::randn({m, k});
    Tensor dw = Tensor::empty({n, k}, DType::f32, kGPU), db = Tensor::empty({n}, DType::f32, kGPU);
    const cuda::LaunchCounts before = cuda::launch_counts();
    REQUIRE(cuda::cublaslt_matmul_bias_grad(g.to(kGPU), x.to(kGPU), dw, db));
    const cuda::LaunchCounts after = cuda::launch_counts();
    CHECK(after.cublas_calls - before.cublas_calls == 1);
    CHECK(after.kernels - before.kernels == 0);
    // f64 references: g^T x and the column sums of g.
    Tensor g64 = g.to(DType::f64), x64 = x.to(DType::f64);
    // The simulated GPU sums in f64 and rounds once; a real one in f32.
    const double tol = 1e-5 + 2e-6 * static_cast<double>(m);
    CHECK(max_abs_diff(dw.to(Device::cpu()).to(DType::f64), matmul(g64.t(), x64)) < tol);
    CHECK(max_abs_diff(db.to(Device::cpu()).to(DType::f64), sum(g64, {0})) < tol);
  }
  // Operands cuBLASLt does not take this way are declined (the caller's plain path runs).
  Tensor dw = Tensor::empty({4, 3}, DType::f64, kGPU), db = Tensor::empty({4}, DType::f64, kGPU);
  CHECK_FALSE(cuda::cublaslt_matmul_bias_grad(Tensor::randn({2, 4}, DType::f64).to(kGPU),
                                              Tensor::randn({2, 3}, DType::f64).to(kGPU), dw, db));
}

// The seed MLP's compiled step on the GPU against the CPU's, and what a step
// costs there: 14 GEMMs (5 with the bias in the epilogue, 5 with the bias
// gradient) and the optimizer's six update regions: 42 graph nodes in all
// (52 before the epilogues; 52 without cuBLASLt; 38 and 48 with the opt-in
// region groups of jit/cuda/region_groups.h, which launch the six as two).  The module jit's step as this test counts it (forward,
// backward, the eager loss and fused Adam): 30 launches (43 before; 40
// without cuBLASLt).
TEST_CASE("cuda: the seed MLP's step with cuBLASLt epilogues equals the CPU step, in 42 graph nodes") {
  SKIP_WITHOUT_GPU();
  SeedStep cpu = seed_mlp_steps(Device::cpu());
  SeedStep gpu = seed_mlp_steps(kGPU);
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(gpu.losses[i] - cpu.losses[i]) < 1e-4);
  }
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(gpu.params[i], cpu.params[i]) < 1e-4);
  }
  const bool lt = cuda::cublas_lt() != nullptr;
  CHECK(count_of(gpu.trace, "= cublas_matmul_bias_grad(") == (lt ? 5u : 0u));
  // The four hidden layers' ReLU in their GEMMs (jit/cuda/lt_activation.cpp), the last layer plain.
  CHECK(count_of(gpu.trace, "= cublas_linear_relu(") == (lt ? 4u : 0u));
  CHECK(count_of(gpu.trace, "= cublas_linear(") == (lt ? 1u : 5u));
  if (!cuda::simulated_counters()) {
    MESSAGE("graph nodes " << gpu.nodes << " (pinned on the simulated GPU only: cuBLASLt may launch more than one kernel)");
    return;
  }
  if (lt) {
    CHECK(gpu.nodes == 42);
    CHECK(gpu.jit_step.kernels + gpu.jit_step.cublas_calls == 30);
  } else {
    CHECK(gpu.nodes == 52);
    CHECK(gpu.jit_step.kernels + gpu.jit_step.cublas_calls == 40);
  }
  std::printf("VOLT_LT_CHILD nodes=%zu jit=%lld\n", gpu.nodes,
              static_cast<long long>(gpu.jit_step.kernels + gpu.jit_step.cublas_calls));
}

// Run by the case below in a child with VOLT_CUBLASLT=0.
TEST_CASE("cuda child: linear without cuBLASLt" * doctest::skip()) {
  if (!std::getenv("VOLT_LT_CHILD")) {
    MESSAGE("runs only as the child process of the cuBLASLt test");
    return;
  }
  SKIP_WITHOUT_GPU();
  Tensor x = Tensor::randn({8, 33}), w = Tensor::randn({17, 33}), b = Tensor::randn({17});
  Tensor xg = x.to(kGPU), wg = w.to(kGPU), bg = b.to(kGPU);
  (void)linear(xg, wg, bg);
  cuda::synchronize(0);
  const cuda::LaunchCounts before = cuda::launch_counts();
  Tensor got = linear(xg, wg, bg);
  const cuda::LaunchCounts after = cuda::launch_counts();
  std::printf("VOLT_LT_CHILD lt=%d calls=%lld kernels=%lld diff=%g\n", cuda::cublas_lt() != nullptr,
              static_cast<long long>(after.cublas_calls - before.cublas_calls),
              static_cast<long long>(after.kernels - before.kernels),
              max_abs_diff(got.to(Device::cpu()), linear(x, w, b)));
}

TEST_CASE("cuda: without cuBLASLt (VOLT_CUBLASLT=0) linear and the seed step take cuBLAS's plain path") {
  SKIP_WITHOUT_GPU();
  if (!cuda::simulated_counters()) {
    VOLT_SKIP("counts come from the simulated GPU (tests/cudasim)");
  }
  const std::string cmd = "VOLT_LT_CHILD=1 VOLT_CUBLASLT=0 /proc/" + std::to_string(::getpid()) +
                          "/exe -ns -tc='cuda child: linear without cuBLASLt,cuda: the seed MLP*' 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  INFO(out);
  int lt = -1;
  long long calls = -1, kernels = -1, jit = -1;
  size_t nodes = 0;
  double diff = 1;
  const size_t at = out.find("VOLT_LT_CHILD lt=");
  REQUIRE(at != std::string::npos);
  std::sscanf(out.c_str() + at, "VOLT_LT_CHILD lt=%d calls=%lld kernels=%lld diff=%lf", &lt, &calls, &kernels, &diff);
  CHECK(lt == 0);
  CHECK(calls == 1);
  CHECK(kernels == 1);  // the bias broadcast into the output, then the GEMM adds onto it
  CHECK(diff < 1e-4);
  const size_t at2 = out.find("VOLT_LT_CHILD nodes=");
  REQUIRE(at2 != std::string::npos);
  std::sscanf(out.c_str() + at2, "VOLT_LT_CHILD nodes=%zu jit=%lld", &nodes, &jit);
  CHECK(nodes == 52);
  CHECK(jit == 40);
  CHECK(out.find("Status: SUCCESS") != std::string::npos);
}
#endif  // VOLT_WITH_CUDA

#ifdef VOLT_WITH_CUDA
// The eager loss of the module jit's step: cross_entropy's mean backward
// counts the rows not ignored inside its kernel up to 4096 rows (one launch),
// beyond that with a reduction first (three launches more); both as the CPU.
TEST_CASE("cuda: cross_entropy's mean backward counts its rows in the kernel up to 4096 rows") {
  SKIP_WITHOUT_GPU();
  manual_seed(23);
  long long launches[2] = {0, 0};
  int at = 0;
  for (int64_t n : {300, 5000}) {
    INFO("rows " << n);
    Tensor x = Tensor::randn({n, 7});
    Tensor t = Tensor::randint(0, 7, {n});
    t.narrow(0, 0, n / 3).fill_(-100);  // ignored rows: the mean divides by the rest
    Tensor xc = x.detach().requires_grad_(true);
    cross_entropy(xc, t).backward();
    Tensor xg = x.to(kGPU).requires_grad_(true), tg = t.to(kGPU);
    cross_entropy(xg, tg).backward();  // compiles the kernels outside the count
    xg = x.to(kGPU).requires_grad_(true);
    Tensor loss = cross_entropy(xg, tg);
    const cuda::LaunchCounts before = cuda::launch_counts();
    loss.backward();
    const cuda::LaunchCounts after = cuda::launch_counts();
    launches[at++] = after.kernels - before.kernels;
    CHECK(max_abs_diff(xg.grad().to(Device::cpu()), xc.grad()) < 1e-6);
  }
  CHECK(launches[1] - launches[0] == 3);
}
#endif  // VOLT_WITH_CUDA
