// Row regions on CUDA (jit/codegen_rows.cpp): a block per row, its threads
// combining partial sums and maxima in shared memory.  The jitted softmax,
// log_softmax and LayerNorm, forward and backward, equal the CPU's eager
// results at odd row lengths; every row kernel compiles with NVRTC for
// compute_80 and compute_90.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <functional>

#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/cuda/skip_without_gpu.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_close;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

const std::vector<std::pair<std::string, std::function<Fn(int64_t)>>>& row_ops() {
  static const std::vector<std::pair<std::string, std::function<Fn(int64_t)>>> ops = {
      {"softmax", [](int64_t) -> Fn { return [](const std::vector<Tensor>& in) { return softmax(in[0], -1); }; }},
      {"log_softmax",
       [](int64_t) -> Fn { return [](const std::vector<Tensor>& in) { return log_softmax(in[0], -1); }; }},
      {"layer_norm", [](int64_t L) -> Fn {
         return [L](const std::vector<Tensor>& in) { return layer_norm(in[0], {L}, in[1], in[2]); };
       }}};
  return ops;
}

// f's output and the gradients of sum(f * w), jitted, on `device` (or eagerly on the CPU).
std::vector<Tensor> run(const Fn& f, const std::vector<Tensor>& xs, const Tensor& w, Device device, bool jitted,
                        jit::JitFunction& jf) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : xs) leaves.push_back(x.detach().clone().to(device).requires_grad_());
  Tensor y = jitted ? jf(leaves).at(0) : f(leaves);
  std::vector<Tensor> r{y.detach().to(kCPU)};
  sum(mul(y, w.to(device))).backward();
  for (const Tensor& l : leaves) r.push_back(l.grad().to(kCPU));
  return r;
}

}  // namespace

TEST_CASE("cuda: row regions (softmax, log_softmax, layer_norm, both ways) equal the CPU at odd row lengths") {
  SKIP_WITHOUT_GPU();
  manual_seed(5);
  for (int64_t L : {1, 7, 127, 1000, 4097}) {
    Tensor x = mul(Tensor::randn({2, L}), 3.0), g = Tensor::randn({L}), b = Tensor::randn({L});
    for (const auto& [name, make] : row_ops()) {
      const Fn f = make(L);
      const std::vector<Tensor> xs = name == "layer_norm" ? std::vector<Tensor>{x, g, b} : std::vector<Tensor>{x};
      Tensor w = Tensor::randn({2, L});
      auto jf = jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
      const auto want = run(f, xs, w, kCPU, false, jf);
      const auto got = run(f, xs, w, Device::cuda(0), true, jf);
      const std::string at = name + " rows of " + std::to_string(L);
      for (size_t i = 0; i < got.size(); ++i)
        check_close(at + (i == 0 ? " output" : " gradient " + std::to_string(i - 1)), got[i], want[i], 1e-5, 1e-5);
      int rows = 0;
      for (const jit::BoundSymbol& s : jit::last_traces(jf).back().bsyms) rows += jit::is_row_region(s) ? 1 : 0;
      CHECK_MESSAGE(rows == 1, at);
    }
  }
}

TEST_CASE("nvrtc: the row kernels (softmax, log_softmax, layer_norm, both ways) compile for compute_80 and compute_90") {
  // The generator writes one kernel for both devices; the CPU jit's kernels are the GPU's.
  for (DType dt : {DType::f32, DType::f64})
    for (const auto& [name, make] : row_ops()) {
      const Fn f = make(33);
      auto jf = jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
      std::vector<Tensor> xs{Tensor::randn({4, 33}, dt).requires_grad_()};
      if (name == "layer_norm") xs = {xs[0], Tensor::randn({33}, dt).requires_grad_(), Tensor::randn({33}, dt).requires_grad_()};
      sum(jf(xs).at(0)).backward();
      int compiled = 0;
      for (const auto& k : jit::last_kernels(jf)) {
        if (k->row_len == 0) continue;
        for (const char* arch : {"compute_80", "compute_90"}) {
          INFO(name << " " << arch);
          CHECK_NOTHROW(cuda::compile_ptx(jit::cuda_source(*k), arch, true));
        }
        ++compiled;
      }
      CHECK_MESSAGE(compiled == 2, name);  // forward and backward
    }
}
#endif
