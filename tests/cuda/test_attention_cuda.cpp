// The flash attention kernels on a CUDA device (or tests/cudasim) against the
// CPU's: forward, backward, causal, dropout, and the jit running them.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <string>

#include <volt/jit/jit.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/cuda/skip_without_gpu.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_close;

namespace {
const Device kGPU = Device::cuda(0);
}

TEST_CASE("cuda: attention: the flash kernels equal the CPU's at T = 1, 7, 127 (f32, f64, causal, dropout)") {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t T : {1, 7, 127})
      for (bool causal : {false, true})
        for (double p : {0.0, 0.25}) {
          if (dt == DType::f64 && T == 127 && p > 0) continue;  // the simulated GPU is slow; f32 covers it
          const std::string label = std::string(dtype_name(dt)) + " T=" + std::to_string(T) +
                                    (causal ? " causal" : "") + (p > 0 ? " dropout" : "");
          manual_seed(T);
          Tensor q = Tensor::randn({1, 2, T, 5}, dt), k = Tensor::randn({1, 2, T, 5}, dt),
                 v = Tensor::randn({1, 2, T, 6}, dt), g = Tensor::randn({1, 2, T, 6}, dt);
          const FlashParams fp{.causal = causal, .scale = 0.4, .dropout_p = p, .seed = 42, .offset = 1000};
          auto cpu_f = flash_attention_forward(q, k, v, fp);
          auto cpu_b = flash_attention_backward(g, q, k, v, cpu_f[0], cpu_f[1], fp);
          auto gpu_f = flash_attention_forward(q.to(kGPU), k.to(kGPU), v.to(kGPU), fp);
          auto gpu_b = flash_attention_backward(g.to(kGPU), q.to(kGPU), k.to(kGPU), v.to(kGPU), gpu_f[0], gpu_f[1], fp);
          check_close(label + " out", gpu_f[0].to(kCPU), cpu_f[0], 1e-5, 1e-5);
          check_close(label + " lse", gpu_f[1].to(kCPU), cpu_f[1], 1e-5, 1e-5);
          check_close(label + " dq", gpu_b[0].to(kCPU), cpu_b[0], 1e-5, 1e-5);
          check_close(label + " dk", gpu_b[1].to(kCPU), cpu_b[1], 1e-5, 1e-5);
          check_close(label + " dv", gpu_b[2].to(kCPU), cpu_b[2], 1e-5, 1e-5);
        }
}

TEST_CASE("cuda: attention: the jit runs it by flash on the GPU, equal to eager on the CPU") {
  SKIP_WITHOUT_GPU();
  manual_seed(4);
  Tensor q = Tensor::randn({1, 2, 7, 8}), k = Tensor::randn({1, 2, 7, 8}), v = Tensor::randn({1, 2, 7, 8}),
         g = Tensor::randn({1, 2, 7, 8});
  auto run = [&](Device d, bool jitted, std::string* trace) {
    Tensor a = q.to(d).requires_grad_(), b = k.to(d).requires_grad_(), c = v.to(d).requires_grad_();
    auto f = jit::jit([](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], {.causal = true})};
    });
    Tensor y = jitted ? f({a, b, c}).at(0) : scaled_dot_product_attention(a, b, c, {.causal = true});
    sum(mul(y, g.to(d))).backward();
    if (trace) *trace = jit::last_traces(f).back().str();
    return std::vector<Tensor>{y.detach().to(kCPU), a.grad().to(kCPU), b.grad().to(kCPU), c.grad().to(kCPU)};
  };
  std::string trace;
  const auto want = run(kCPU, false, nullptr);
  const auto got = run(kGPU, true, &trace);
  for (size_t i = 0; i < want.size(); ++i) check_close("jit on the GPU " + std::to_string(i), got[i], want[i], 1e-5, 1e-5);
  CHECK(trace.find("flash_attention(") != std::string::npos);
}

#endif
