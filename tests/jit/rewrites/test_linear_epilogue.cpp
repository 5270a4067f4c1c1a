// Bias, ReLU and dropout in the store of the jit's linear (jit/rewrites/gemm_epilogue.h):
// the module jit's forward regions begin with the layer's linear, and give the
// bits eager mode gives (whose Sequential runs linear_relu_dropout), masks
// included; the backward still gets what it saves.
#include <doctest/doctest.h>

#include <memory>

#include <volt/jit/check.h>
#include <volt/jit/codegen.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

// The regions of a trace that begin with a linear, by the linear's output shape.
std::vector<Shape> linear_regions(const jit::Trace& t) {
  std::vector<Shape> r;
  for (const jit::BoundSymbol& b : t.bsyms)
    if (jit::is_gemm_epilogue(b) && b.subsymbols.front().call.op == OpId::linear)
      r.push_back(b.subsymbols.front().outputs.front().sizes());
  return r;
}

void check_traces(const std::vector<jit::Trace>& traces) {
  for (const jit::Trace& t : traces) CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
}

}  // namespace

TEST_CASE("linear epilogue: the jitted MLP with dropout equals eager bit for bit, forward, backward and eval") {
  // 300 -> 512 -> 200 -> 5: at batch 96 the first layer's product (96 x 512,
  // depth 300) is masked block by block in the GEMM's store; at batch 8 and
  // in the smaller layers it is made whole, then masked.
  for (int64_t batch : {8, 96}) {
    CAPTURE(batch);
    manual_seed(11);
    auto eager_net = std::make_shared<nn::MLP>(300, std::vector<int64_t>{512, 200, 5}, true, 0.25);
    manual_seed(11);
    auto jit_net = std::make_shared<nn::MLP>(300, std::vector<int64_t>{512, 200, 5}, true, 0.25);
    auto jm = jit::jit(jit_net);
    manual_seed(12);
    const Tensor x = Tensor::randn({batch, 300});
    const Tensor target = Tensor::randint(0, 5, {batch});

    for (int call = 0; call < 2; ++call) {  // a trace, then the cached one
      const PhiloxState st = rng_state();
      const Tensor eager_out = (*eager_net)(x);
      cross_entropy(eager_out, target).backward();
      const PhiloxState after_eager = rng_state();
      set_rng_state(st);
      const Tensor jit_out = jm(x);
      cross_entropy(jit_out, target).backward();
      CHECK(rng_state().offset == after_eager.offset);
      CHECK(max_abs_diff(jit_out, eager_out) == 0);
      // Some units dropped, some kept: the masks are the same, not both empty.
      const double zeros = sum(eq(jit_out, 0.0)).item_double();
      CHECK(zeros > 0);
      CHECK(zeros < static_cast<double>(jit_out.numel()));
      const auto pe = eager_net->parameters(), pj = jit_net->parameters();
      for (size_t i = 0; i < pe.size(); ++i) {
        CAPTURE(i);
        CHECK(max_abs_diff(pj[i].grad(), pe[i].grad()) <= 1e-6);
      }
      eager_net->zero_grad();
      jit_net->zero_grad();
    }
    // Every layer's forward is one region beginning with its linear; the last
    // (no ReLU) has its dropout there too.
    const jit::Trace& fwd = jit::last_traces(jm).back();
    CHECK(linear_regions(fwd) == std::vector<Shape>{{batch, 512}, {batch, 200}, {batch, 5}});
    CHECK(fwd.str().find("volt.linear(input, _0_weight, _0_bias)") != std::string::npos);
    check_traces(jit::last_traces(jm));
    check_traces(jit::last_backward_traces(jm));

    eager_net->eval();
    jit_net->eval();
    NoGradGuard ng;
    const Tensor e = (*eager_net)(x);
    const Tensor j = jm(x);
    CHECK(max_abs_diff(j, e) == 0);
    CHECK(sum(eq(j, 0.0)).item_double() == 0);  // no dropout in eval
    CHECK(linear_regions(jit::last_traces(jm).back()) == std::vector<Shape>{{batch, 512}, {batch, 200}});
    check_traces(jit::last_traces(jm));
  }
}

TEST_CASE("linear epilogue: a linear whose product is read twice keeps its own call") {
  // The product feeds the region and is also an output: nothing to fuse.
  Tensor w = Tensor::randn({6, 4});
  auto jf = jit::jit(
      [](const std::vector<Tensor>& a) {
        Tensor y = linear(a[0], a[1]);
        return std::vector<Tensor>{relu(y), y};
      },
      {"x", "w"});
  const Tensor x = Tensor::randn({5, 4});
  const std::vector<Tensor> got = jf({x, w});
  CHECK(max_abs_diff(got[1], linear(x, w)) == 0);
  CHECK(max_abs_diff(got[0], relu(linear(x, w))) == 0);
  CHECK(linear_regions(jit::last_traces(jf).back()).empty());
}

TEST_CASE("linear epilogue: the compiled step's forward in the linears' store, bit for bit, no allocation per step") {
  // Batch 96: the first layer's product (96 x 512) masked block by block in the GEMM's store.
  struct Run {
    std::shared_ptr<nn::MLP> net;
    std::unique_ptr<nn::Adam> opt;
    std::unique_ptr<jit::CompiledStep> step;
  };
  auto make = [](bool epilogues) {
    manual_seed(21);
    Run r;
    r.net = std::make_shared<nn::MLP>(300, std::vector<int64_t>{512, 200, 5}, true, 0.25);
    r.opt = std::make_unique<nn::Adam>(r.net->parameters(), nn::AdamOptions{.lr = 1e-3});
    jit::StepOptions o;
    o.state = {*r.net, *r.opt};
    o.gemm_epilogues = epilogues;
    o.reuse_outputs = true;
    r.step = std::make_unique<jit::CompiledStep>(jit::compile_step(
        [net = r.net.get(), opt = r.opt.get()](const Tensor& x, const Tensor& y) {
          Tensor loss = cross_entropy((*net)(x), y);
          opt->zero_grad();
          loss.backward();
          opt->step();
          return loss;
        },
        std::move(o)));
    return r;
  };
  Run fused = make(true), plain = make(false);
  manual_seed(22);
  const Tensor x = Tensor::randn({96, 300}), y = Tensor::randint(0, 5, {96});
  manual_seed(23);
  for (int i = 0; i < 3; ++i) (*fused.step)(x, y);
  manual_seed(23);
  for (int i = 0; i < 3; ++i) (*plain.step)(x, y);
  const auto pf = fused.net->parameters(), pp = plain.net->parameters();
  for (size_t i = 0; i < pf.size(); ++i) CHECK(max_abs_diff(pf[i], pp[i]) == 0);

  const jit::Trace& last = fused.step->last_traces().back();
  // The hidden layers' ReLUs run in their GEMMs' store; the logits go to the
  // loss's row region (log_softmax's max and sum, over each row of 5), whose
  // passes over a row are no GEMM epilogue.
  CHECK(linear_regions(last) == std::vector<Shape>{{96, 512}, {96, 200}});
  int row_regions = 0;
  for (const jit::BoundSymbol& b : last.bsyms) row_regions += jit::is_row_region(b) ? 1 : 0;
  CHECK(row_regions >= 1);
  CHECK(linear_regions(plain.step->last_traces().back()).empty());
  check_traces(fused.step->last_traces());
  const std::string printed = fused.step->last_trace_str();
  CHECK(printed.find("# ---- forward ----\n  (") != std::string::npos);  // the forward begins with a region

  const uint64_t before = Storage::allocation_count();
  for (int i = 0; i < 3; ++i) (*fused.step)(x, y);
  CHECK(Storage::allocation_count() - before == 0);
}
