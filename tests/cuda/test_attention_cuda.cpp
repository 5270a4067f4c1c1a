// The flash attention kernels on a CUDA device (or tests/cudasim) against the
// CPU's: forward, backward, causal, dropout, and the jit running them.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <optional>
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

// bf16 and f16 operands are loaded into float and the results rounded once:
// bit for bit the f32 kernels on the widened values, rounded; lse in f32.
TEST_CASE("cuda: attention: the flash kernels on bf16 and f16 equal the f32 kernels on the widened values, rounded") {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t T : {1, 7, 40})
      for (bool causal : {false, true}) {
        const std::string label = std::string(dtype_name(dt)) + " T=" + std::to_string(T) + (causal ? " causal" : "");
        manual_seed(T + 11);
        Tensor q = Tensor::randn({1, 2, T, 5}).to(dt).to(kGPU), k = Tensor::randn({1, 2, T, 5}).to(dt).to(kGPU),
               v = Tensor::randn({1, 2, T, 6}).to(dt).to(kGPU), g = Tensor::randn({1, 2, T, 6}).to(dt).to(kGPU);
        auto f32 = [](const Tensor& t) { return t.to(DType::f32); };
        const FlashParams fp{.causal = causal, .scale = 0.4, .dropout_p = T == 40 ? 0.25 : 0.0, .seed = 5, .offset = 7};
        auto half_f = flash_attention_forward(q, k, v, fp);
        auto ref_f = flash_attention_forward(f32(q), f32(k), f32(v), fp);
        REQUIRE(half_f[0].dtype() == dt);
        REQUIRE(half_f[1].dtype() == DType::f32);
        check_close(label + " out", f32(half_f[0]).to(kCPU), f32(ref_f[0].to(dt)).to(kCPU), 0, 0);
        check_close(label + " lse", half_f[1].to(kCPU), ref_f[1].to(kCPU), 0, 0);
        auto half_b = flash_attention_backward(g, q, k, v, half_f[0], half_f[1], fp);
        auto ref_b = flash_attention_backward(f32(g), f32(q), f32(k), f32(v), f32(half_f[0]), half_f[1], fp);
        for (size_t i = 0; i < 3; ++i) {
          REQUIRE(half_b[i].dtype() == dt);
          check_close(label + " grad " + std::to_string(i), f32(half_b[i]).to(kCPU), f32(ref_b[i].to(dt)).to(kCPU), 0, 0);
        }
        // And the CPU's 16-bit kernels, the same arithmetic in another order: within a unit of the 16-bit type.
        auto cpu_f = flash_attention_forward(q.to(kCPU), k.to(kCPU), v.to(kCPU), fp);
        const double u = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
        check_close(label + " out against the CPU", f32(half_f[0]).to(kCPU), f32(cpu_f[0]), u, u);
      }
}

TEST_CASE("cuda: attention: the jit runs it by flash on the GPU, equal to eager on the CPU") {
  SKIP_WITHOUT_GPU();
  manual_seed(4);
  Tensor q = Tensor::randn({1, 2, 7, 8}), k = Tensor::randn({1, 2, 7, 8}), v = Tensor::randn({1, 2, 7, 8}),
         g = Tensor::randn({1, 2, 7, 8});
  auto run = [&](Device d, bool jitted, std::string* trace) {
    Tensor a = q.to(d).requires_grad_(), b = k.to(d).requires_grad_(), c = v.to(d).requires_grad_();
    static const AttentionOptions causal{.causal = true, .scale = std::nullopt};
    auto f = jit::jit([](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], causal)};
    });
    Tensor y = jitted ? f({a, b, c}).at(0) : scaled_dot_product_attention(a, b, c, causal);
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
