// The optimizer's update in the store of the weight gradient's GEMM
// (jit/rewrites/gemm_epilogue.h): the same program, the same bits, less traffic.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <volt/jit/check.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

#include "jit/rewrites/epilogue_mlp.h"
#include "tensor/reference.h"

using namespace volt;
using namespace volt::testing::epilogue_mlp;
using volt::testing::max_abs_diff;

// The MLP of epilogue_mlp.h: the first weight's gradient (200 x 300) is large
// enough to be made in chunks of rows (batch 8 and 32; the last chunk takes
// the 8 rows left over) or, deeper (batch 80), whole; the second's (5 x 200)
// is always made whole.

TEST_CASE("gemm epilogue: Adam in the weight gradient's GEMM equals eager, and the unfused step bit for bit") {
  for (int64_t batch : {8, 32, 80}) {
    CAPTURE(batch);
    const Run eager = train(batch, 12, nullptr);
    jit::StepOptions fused_options, plain_options, unplanned_options;
    plain_options.gemm_epilogues = false;
    unplanned_options.memory_plan = false;  // the regions run by the fusion executor instead
    std::unique_ptr<jit::CompiledStep> step;
    const Run fused = train(batch, 12, &fused_options, &step);
    const Run plain = train(batch, 12, &plain_options);
    const Run unplanned = train(batch, 12, &unplanned_options);
    // Against eager (at batch 80 the unfused step's own reductions already
    // round differently from eager's, by ~1e-5 after 12 Adam steps).
    const double tolerance = batch <= 32 ? 1e-6 : 1e-4;
    CHECK(loss_diff(fused, eager) < tolerance);
    CHECK(param_diff(fused, eager) < tolerance);
    CHECK(param_diff(plain, eager) < tolerance);
    // The same kernels on the same products: not a bit apart, with or without the plan.
    CHECK(loss_diff(fused, plain) == 0);
    CHECK(param_diff(fused, plain) == 0);
    CHECK(param_diff(unplanned, plain) == 0);

    // Both weights' updates begin with the GEMM making their gradient, and
    // every trace of the step (the new pass's too) checks out.
    const jit::Trace& last = step->last_traces().back();
    int regions = 0, weight_updates = 0;
    for (const jit::BoundSymbol& b : last.bsyms) {
      if (!jit::is_gemm_epilogue(b)) continue;
      ++regions;
      const Shape& product = b.subsymbols.front().outputs.front().sizes();
      if (product == Shape{200, 300} || product == Shape{5, 200}) ++weight_updates;
    }
    CHECK(weight_updates == 2);
    CHECK(regions >= 2);
    bool pass_ran = false;
    for (const jit::Trace& t : step->last_traces()) {
      CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
      pass_ran = pass_ran || t.provenance == "GEMM epilogues";
    }
    CHECK(pass_ran);
    CHECK(step->last_trace_str().find("prims.matmul") != std::string::npos);
  }
}

TEST_CASE("gemm epilogue: the chunked update gives the same bits at 1, 2 and 3 threads") {
  // Each thread makes its chunks of the weight gradient in a buffer of its
  // own; which thread takes which chunk must not show in the result.
  const int before = cpu::num_threads();
  jit::StepOptions options;
  std::vector<Run> runs;
  for (int threads : {1, 2, 3}) {
    cpu::set_num_threads(threads);
    runs.push_back(train(8, 6, &options));
  }
  cpu::set_num_threads(before);
  for (size_t i = 1; i < runs.size(); ++i) {
    CAPTURE(i);
    CHECK(loss_diff(runs[i], runs[0]) == 0);
    CHECK(param_diff(runs[i], runs[0]) == 0);
  }
  // And the chunks updated every row of the weight (against eager Adam).
  const Run eager = train(8, 6, nullptr);
  CHECK(param_diff(runs[0], eager) < 1e-6);
}

TEST_CASE("gemm epilogue: the fused step allocates nothing per step") {
  Run r = make_run();
  manual_seed(5);
  const Tensor x = Tensor::randn({8, 300}), y = Tensor::randint(0, 5, {8});
  auto step = jit::compile_step(
      [&](const Tensor& a, const Tensor& b) { return eager_step(*r.net, *r.opt, a, b); },
      {.state = {*r.net, *r.opt}, .reuse_outputs = true});
  step(x, y);
  const uint64_t before = Storage::allocation_count();
  for (int i = 0; i < 5; ++i) step(x, y);
  CHECK(Storage::allocation_count() - before == 0);
}

TEST_CASE("gemm epilogue: without the step's pass nothing is fused into a GEMM") {
  jit::StepOptions options;
  options.gemm_epilogues = false;
  std::unique_ptr<jit::CompiledStep> step;
  train(8, 2, &options, &step);
  for (const jit::BoundSymbol& b : step->last_traces().back().bsyms) CHECK_FALSE(jit::is_gemm_epilogue(b));
}
