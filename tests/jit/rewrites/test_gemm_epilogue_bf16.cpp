// Under bf16 autocast a weight's gradient is a bf16 matmul keeping its f32
// sums (out_dtype=f32); the GEMM epilogue pass puts it at the head of Adam's
// update region as it does for f32.  The fused step must give the bits of the same
// step without the pass, on every bf16 GEMM path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include <volt/jit/check.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "jit/rewrites/epilogue_mlp.h"
#include "tensor/reference.h"

using namespace volt;
using namespace volt::testing::epilogue_mlp;
using volt::testing::max_abs_diff;

namespace {

// `steps` compiled bf16 steps of batch `batch` of the MLP (bias on or off):
// both weights' gradients (200 x 300, 5 x 200) are bf16 products with f32
// sums, made whole and then updated by Adam's kernel in the same region.
Run train_bf16(int64_t batch, bool bias, int steps, jit::StepOptions o, std::unique_ptr<jit::CompiledStep>* keep = nullptr) {
  o.autocast = DType::bf16;
  return train(batch, steps, &o, keep, bias);
}

// The step's regions whose GEMM is a bf16 matmul with f32 sums, by product shape.
std::vector<Shape> bf16_weight_updates(const jit::CompiledStep& step) {
  std::vector<Shape> out;
  for (const jit::BoundSymbol& b : step.last_traces().back().bsyms) {
    if (!jit::is_gemm_epilogue(b)) continue;
    const jit::BoundSymbol& g = b.subsymbols.front();
    if (g.call.op == OpId::matmul && g.call.attrs.flag && tensor_args(g)[0].dtype() == DType::bf16)
      out.push_back(g.outputs.front().sizes());
  }
  return out;
}

struct PathGuard {
  cpu::Bf16Gemm prev = cpu::bf16_gemm();
  explicit PathGuard(cpu::Bf16Gemm p) { cpu::set_bf16_gemm(p); }
  ~PathGuard() { cpu::set_bf16_gemm(prev); }
};

}  // namespace

TEST_CASE("gemm epilogue bf16: Adam in the bf16 weight gradient's GEMM equals the step without the pass, bit for bit") {
  for (int64_t batch : {8, 32, 80})
    for (bool bias : {true, false}) {
      CAPTURE(batch);
      CAPTURE(bias);
      jit::StepOptions fused_options, plain_options, unplanned_options;
      plain_options.gemm_epilogues = false;
      unplanned_options.memory_plan = false;  // the regions run by the fusion executor instead
      std::unique_ptr<jit::CompiledStep> step, plain_step;
      const Run fused = train_bf16(batch, bias, 6, fused_options, &step);
      const Run plain = train_bf16(batch, bias, 6, plain_options, &plain_step);
      const Run unplanned = train_bf16(batch, bias, 6, unplanned_options);
      CHECK(loss_diff(fused, plain) == 0);
      CHECK(param_diff(fused, plain) == 0);
      CHECK(param_diff(unplanned, plain) == 0);
      // Training moved the weights (the update ran on every chunk).
      CHECK(fused.losses.back() != fused.losses.front());

      // Both weights' updates begin with the bf16 GEMM of their gradient.
      const std::vector<Shape> updates = bf16_weight_updates(*step);
      CHECK(std::count(updates.begin(), updates.end(), Shape{200, 300}) == 1);
      CHECK(std::count(updates.begin(), updates.end(), Shape{5, 200}) == 1);
      CHECK(bf16_weight_updates(*plain_step).empty());
      for (const jit::Trace& t : step->last_traces())
        CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
      if (batch == 8 && bias) {
        const std::string s = step->last_trace_str();
        const size_t at = s.find("out_dtype=f32");
        REQUIRE(at != std::string::npos);
        MESSAGE("the bf16 step's weight update region:\n" << s.substr(s.rfind("cpuFusion", at), 600));
      }
    }
}

TEST_CASE("gemm epilogue bf16: each bf16 GEMM path and 1 to 3 threads give the unfused step's bits") {
  std::vector<cpu::Bf16Gemm> paths{cpu::Bf16Gemm::f32};
  if (cpu::bf16_dot_supported()) paths.push_back(cpu::Bf16Gemm::dpbf16);
  if (cpu::bf16_amx_supported()) paths.push_back(cpu::Bf16Gemm::amx);
  const int before = cpu::num_threads();
  for (cpu::Bf16Gemm path : paths) {
    const std::string name = cpu::bf16_gemm_name(path);
    CAPTURE(name);
    PathGuard guard(path);
    jit::StepOptions plain_options;
    plain_options.gemm_epilogues = false;
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      cpu::set_num_threads(threads);
      const Run plain = train_bf16(8, true, 4, plain_options);
      const Run fused = train_bf16(8, true, 4, {});
      cpu::set_num_threads(before);
      CHECK(loss_diff(fused, plain) == 0);
      CHECK(param_diff(fused, plain) == 0);
    }
  }
}
