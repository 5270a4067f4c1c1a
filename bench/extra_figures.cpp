// volt_bench's figures besides the matrix (bench/extra_figures.h).
#include "extra_figures.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>

#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/cuda/runtime.h>
#endif

namespace volt::benchmark {

using bench::Clock;
using bench::us_since;

std::string self_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("volt_bench") : p.string();
}

// Runs a command and returns its standard output ("" if it failed).
std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int rc = ::pclose(p);
    if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  } else if (status) {
    *status = -1;
  }
  return out;
}

// The number after "key": in a one-line JSON object (NaN when absent).
double json_number(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t at = line.find(k);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}
std::string json_string(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  size_t at = line.find(k);
  if (at == std::string::npos) return "";
  size_t end = line.find('"', at + k.size());
  return line.substr(at + k.size(), end - at - k.size());
}

// Child process: the first jitted training step (trace, passes, compile of the
// forward and backward kernels, and running them once), then the second one for
// comparison.  It runs in a fresh process so that no kernel library is loaded yet.
int first_call_child(const Options& o) {
  const Device device = Device::parse(o.first_call_device);
  auto net = make_model(device);
  net->train();
  auto batches = synthetic_batches(o.first_call_batch, device);
  auto jm = std::make_shared<jit::JitFunction>(jit::jit(net));
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  double ms[2];
  for (int i = 0; i < 2; ++i) {
    const auto t0 = Clock::now();
    Tensor loss = loss_fn((*jm)(batches[i].x), batches[i].y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    synchronize(device);
    ms[i] = us_since(t0) / 1e3;
  }
  auto stats = jit::compile_stats(*jm);
  std::printf("{\"first_ms\":%.3f,\"second_ms\":%.3f,\"jit_ms\":%.3f,\"fusions\":%d}\n", ms[0],
              ms[1], stats.total_ms, stats.fusions);
  return 0;
}

std::vector<Metric> measure_first_call(const Options& o) {
  std::vector<Metric> out;
  namespace fs = std::filesystem;
  const int64_t batch = 8;
  // Cold: an empty kernel cache directory; warm: the same directory again.
  std::string cold_dir;
  if (!o.smoke) {
    char tmpl[] = "/tmp/volt_bench_kernels_XXXXXX";
    if (const char* d = ::mkdtemp(tmpl)) cold_dir = d;
  }
  const std::string exe = self_path();
  const std::string cache_env = cold_dir.empty() ? "" : "VOLT_KERNEL_CACHE=" + cold_dir + " ";
  const int runs = cold_dir.empty() ? 1 : 2;  // smoke: the user's (warm) cache only
  for (int i = 0; i < runs; ++i) {
    int status = 0;
    const std::string line =
        run_capture(cache_env + "'" + exe + "' --first-call " + std::to_string(batch) +
                        " --first-call-device cpu",
                    &status);
    const bool cold = runs == 2 && i == 0;
    Metric m{"jit_first_call", {},
             std::string(cold ? "cold kernel cache (empty directory)" : "warm kernel cache") +
                 "; jit_ms: the jit's own account of the miss (passes, and the C++ compiler when cold)"};
    if (status != 0 || line.empty()) {
      m.note += "; the measuring process failed";
    } else {
      m.values = {{"batch", double(batch)},
                  {"first_ms", json_number(line, "first_ms")},
                  {"second_ms", json_number(line, "second_ms")},
                  {"jit_ms", json_number(line, "jit_ms")},
                  {"fusions", json_number(line, "fusions")},
                  {"cold", cold ? 1.0 : 0.0}};
    }
    out.push_back(m);
  }
  if (!cold_dir.empty()) {
    std::error_code ec;
    fs::remove_all(cold_dir, ec);
  }
  return out;
}

// The jit's cost per call on a cache hit: a + b on one-element tensors,
// against the same eager op.
Metric measure_call_overhead(const Options& o) {
  Tensor a = Tensor::ones({1}), b = Tensor::full({1}, 2.0);
  auto f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; },
                    {"a", "b"});
  const std::vector<Tensor> args{a, b};
  const int64_t n = o.smoke ? 200 : 20000;
  Tensor sink;
  auto per_call = [&](const std::function<void()>& call) {
    for (int i = 0; i < 100; ++i) call();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {  // the best of 5 runs: the least disturbed
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < n; ++i) call();
      best = std::min(best, us_since(t0) / n);
    }
    return best;
  };
  const double eager_us = per_call([&] { sink = a + b; });
  const double jit_us = per_call([&] { sink = f(args)[0]; });
  VOLT_CHECK(sink.item<double>() == 3.0, "volt_bench", "a + b gave " << sink.item<double>());
  return {"jit_call_overhead", {{"eager_us", eager_us}, {"jit_us", jit_us}, {"overhead_us", jit_us - eager_us}},
          "a + b on 1-element CPU tensors, cache hit"};
}

// Copy bandwidth (bytes read + written per second) with one thread and with all,
// on buffers twice the last-level cache (DRAM) and on buffers that fit in it.
Metric measure_bandwidth(const Options& o) {
  Metric m{"copy_bandwidth", {}, "GB/s counting read + write; dram: 2 x 64 MiB, cache: 2 x 4 MiB"};
  auto run = [&](size_t bytes, bool threads) {
    const size_t n = bytes / sizeof(float);
    std::vector<float> src(n, 1.0f), dst(n, 0.0f);
    float* d = dst.data();
    const float* s = src.data();
    const int reps = o.smoke ? 1 : std::max<int>(3, int((1u << 30) / bytes));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      auto copy = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = s[i];
      };
      if (threads)
        cpu::parallel_for(static_cast<int64_t>(n), int64_t(1) << 16, copy);  // volt's threads
      else
        copy(0, static_cast<int64_t>(n));
      best = std::min(best, us_since(t0));
    }
    volatile float keep = dst[n / 2];
    (void)keep;
    return 2.0 * bytes / (best * 1e-6) / 1e9;
  };
  const size_t dram = o.smoke ? (4u << 20) : (64u << 20);
  m.values = {{"dram_1_thread", run(dram, false)},
              {"dram_all_threads", run(dram, true)},
              {"cache_1_thread", run(4u << 20, false)},
              {"cache_all_threads", run(4u << 20, true)}};
  return m;
}

double peak_rss_mb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux reports KiB
}

// The least memory traffic of one training step (bytes), whatever the batch:
// the forward reads every parameter, the backward reads the weights again for
// input gradients (all layers but the first) and writes every gradient, and
// Adam reads p, g, m, v and writes p, m, v.  Activations (small at batch 8) not counted.
double step_min_bytes(const std::shared_ptr<nn::MLP>& net) {
  const auto params = net->parameters();
  double all = 0, first = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    all += params[i].numel();
    if (i < 2) first += params[i].numel();  // 0.weight, 0.bias
  }
  return 4.0 * (all + (all - first) + all + 7 * all);
}

#ifdef VOLT_WITH_CUDA
// The 14 GEMMs of one training step of this model, in cuBLAS alone (FP32):
// 5 forward, 5 weight-gradient and 4 input-gradient products.  Row-major
// C (m, n) = A (m, k) B (k, n) is column-major C^T = B^T A^T.
Metric measure_cublas_floor(int64_t batch, int reps) {
  const int64_t dims[] = {784, 784, 784, 784, 28, 10};
  std::vector<std::pair<std::string, double>> v;
  cuda::DeviceGuard guard(0);
  cublasHandle_t h = cuda::cublas_handle(0);
  cudaStream_t s = cuda::stream(0);
  float *A = nullptr, *B = nullptr, *C = nullptr;
  const size_t big = size_t(std::max<int64_t>(batch, 784)) * 784 * sizeof(float);
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&A), big));
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&B), big));
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&C), big));
  // On volt's stream, the one the GEMMs below run on (cudaMemset would use the
  // legacy default stream, which volt's non-blocking stream does not wait for).
  VOLT_CUDA_CHECK(cudaMemsetAsync(A, 0, big, s));
  VOLT_CUDA_CHECK(cudaMemsetAsync(B, 0, big, s));
  const float one = 1, zero = 0;
  auto gemm = [&](int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    // Row-major C(m, n) = op(A) op(B); call column-major C^T = op(B)^T op(A)^T.
    VOLT_CUBLAS_CHECK(volt::cuda::cublas().cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  int(n), int(m), int(k), &one, B, int(tb ? k : n), A,
                                  int(ta ? m : k), &zero, C, int(n)));
  };
  auto step = [&] {
    for (int l = 0; l < 5; ++l) gemm(batch, dims[l + 1], dims[l], false, true);  // x W^T
    for (int l = 0; l < 5; ++l) gemm(dims[l + 1], dims[l], batch, true, false);  // g^T x
    for (int l = 1; l < 5; ++l) gemm(batch, dims[l], dims[l + 1], false, false);  // g W
  };
  VOLT_CUBLAS_CHECK(volt::cuda::cublas().cublasSetStream(h, s));
  for (int i = 0; i < 3; ++i) step();
  cudaEvent_t e0, e1;
  VOLT_CUDA_CHECK(cudaEventCreate(&e0));
  VOLT_CUDA_CHECK(cudaEventCreate(&e1));
  VOLT_CUDA_CHECK(cudaEventRecord(e0, s));
  for (int i = 0; i < reps; ++i) step();
  VOLT_CUDA_CHECK(cudaEventRecord(e1, s));
  VOLT_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  VOLT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return {"cublas_step_gemms", {{"batch", double(batch)}, {"us", 1e3 * ms / reps}},
          "the 14 FP32 GEMMs of one training step, cuBLAS alone"};
}

Metric measure_cuda_memory() {
  auto s = cuda::memory_stats(0);
  return {"cuda_memory",
          {{"peak_mb", s.peak / 1048576.0}, {"reserved_mb", s.reserved / 1048576.0},
           {"malloc_calls", double(s.malloc_calls)}},
          "caching allocator, device 0, whole run"};
}
#endif

}  // namespace volt::benchmark
