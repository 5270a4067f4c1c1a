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

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

// A 300 -> 200 -> 5 MLP with dropout (bias on and off): both weights'
// gradients (200 x 300, 5 x 200) are bf16 products with f32 sums, made whole
// and then updated by Adam's kernel in the same region.
struct Run {
  std::shared_ptr<nn::MLP> net;
  std::unique_ptr<nn::Adam> opt;
  std::vector<double> losses;
};

Tensor step_body(nn::MLP& net, nn::Adam& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

// `steps` compiled bf16 steps of batch `batch`.
Run train(int64_t batch, bool bias, int steps, jit::StepOptions o, std::unique_ptr<jit::CompiledStep>* keep = nullptr) {
  manual_seed(3);
  Run r;
  r.net = std::make_shared<nn::MLP>(300, std::vector<int64_t>{200, 5}, bias, 0.2);
  r.opt = std::make_unique<nn::Adam>(r.net->parameters(), nn::AdamOptions{.lr = 1e-2});
  manual_seed(50);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int i = 0; i < 3; ++i) data.emplace_back(Tensor::randn({batch, 300}), Tensor::randint(0, 5, {batch}));
  o.state = {*r.net, *r.opt};
  o.autocast = DType::bf16;
  auto step = std::make_unique<jit::CompiledStep>(jit::compile_step(
      [net = r.net.get(), opt = r.opt.get()](const Tensor& x, const Tensor& y) { return step_body(*net, *opt, x, y); },
      std::move(o)));
  manual_seed(77);
  for (int i = 0; i < steps; ++i) {
    const auto& [x, y] = data[static_cast<size_t>(i) % data.size()];
    r.losses.push_back((*step)(x, y).item_double());
  }
  if (keep) *keep = std::move(step);
  return r;
}

double param_diff(const Run& a, const Run& b) {
  double d = 0;
  auto pa = a.net->parameters(), pb = b.net->parameters();
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, max_abs_diff(pa[i], pb[i]));
  return d;
}

double loss_diff(const Run& a, const Run& b) {
  double d = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) d = std::max(d, std::fabs(a.losses[i] - b.losses[i]));
  return d;
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
      const Run fused = train(batch, bias, 6, fused_options, &step);
      const Run plain = train(batch, bias, 6, plain_options, &plain_step);
      const Run unplanned = train(batch, bias, 6, unplanned_options);
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
      const Run plain = train(8, true, 4, plain_options);
      const Run fused = train(8, true, 4, {});
      cpu::set_num_threads(before);
      CHECK(loss_diff(fused, plain) == 0);
      CHECK(param_diff(fused, plain) == 0);
    }
  }
}
