// Under bf16 autocast a layer's linear is a bf16 GEMM whose f32 sums (bias
// added in f32) are rounded once to bf16; the GEMM epilogue pass puts the
// elementwise region reading that output (ReLU, dropout, a widening cast, a
// residual add) into the product's region, whose kernel reads the f32 sums
// and rounds each on load (jit/rewrites/gemm_epilogue.h).  Each fused form
// must give the bits of the same program without the pass: the module jit,
// the compiled step and the lazy device.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>

#include <volt/jit/check.h>
#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/step/step.h>
#include <volt/nn/gpt.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "jit/rewrites/epilogue_mlp.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;
using volt::testing::max_abs_diff;

namespace {

// The regions of a trace that begin with a bf16 linear, by its output's shape.
std::vector<Shape> bf16_linear_regions(const jit::Trace& t) {
  std::vector<Shape> r;
  for (const jit::BoundSymbol& b : t.bsyms)
    if (jit::is_gemm_epilogue(b) && b.subsymbols.front().call.op == OpId::linear &&
        b.subsymbols.front().outputs.front().dtype() == DType::bf16)
      r.push_back(b.subsymbols.front().outputs.front().sizes());
  return r;
}

void check_traces(const std::vector<jit::Trace>& traces) {
  for (const jit::Trace& t : traces) CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
}

jit::JitOptions bf16_options(bool epilogues) {
  jit::JitOptions o;
  o.autocast = DType::bf16;
  if (!epilogues) o.pipeline.without = {"GEMM epilogues"};
  return o;
}

std::shared_ptr<nn::MLP> make_mlp(bool bias) {
  manual_seed(31);
  return std::make_shared<nn::MLP>(300, std::vector<int64_t>{256, 200, 5}, bias, 0.25);
}

}  // namespace

TEST_CASE("linear epilogue bf16: the module jit's bf16 forward in the linear's store equals the unfused program bit for bit") {
  for (int64_t batch : {8, 96})
    for (bool bias : {true, false}) {
      CAPTURE(batch);
      CAPTURE(bias);
      clear_autocast_cache();
      auto fused_net = make_mlp(bias), plain_net = make_mlp(bias);
      auto fused = jit::jit(fused_net, bf16_options(true));
      auto plain = jit::jit(plain_net, bf16_options(false));
      manual_seed(32);
      const Tensor x = Tensor::randn({batch, 300});
      const Tensor target = Tensor::randint(0, 5, {batch});
      for (int call = 0; call < 2; ++call) {  // a trace, then the cached one
        const PhiloxState st = rng_state();
        const Tensor out_fused = fused(x);
        cross_entropy(out_fused, target).backward();
        const PhiloxState after = rng_state();
        set_rng_state(st);
        const Tensor out_plain = plain(x);
        cross_entropy(out_plain, target).backward();
        CHECK(rng_state().offset == after.offset);
        CHECK(out_fused.dtype() == DType::bf16);
        CHECK(same_bits(out_fused, out_plain));
        // Dropout dropped some units and kept others, in both alike.
        const double zeros = sum(eq(out_fused, 0.0)).item_double();
        CHECK(zeros > 0);
        CHECK(zeros < static_cast<double>(out_fused.numel()));
        const auto pf = fused_net->parameters(), pp = plain_net->parameters();
        for (size_t i = 0; i < pf.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bits(pf[i].grad(), pp[i].grad()));
        }
        fused_net->zero_grad();
        plain_net->zero_grad();
      }
      // Every layer's forward is one region beginning with its bf16 linear.
      const jit::Trace& fwd = jit::last_traces(fused).back();
      CHECK(bf16_linear_regions(fwd) == std::vector<Shape>{{batch, 256}, {batch, 200}, {batch, 5}});
      CHECK(bf16_linear_regions(jit::last_traces(plain).back()).empty());
      check_traces(jit::last_traces(fused));
      check_traces(jit::last_backward_traces(fused));
      for (const jit::BoundSymbol& b : fwd.bsyms)
        if (jit::is_gemm_epilogue(b)) {
          CHECK(jit::kernel_source(b).find("f32 sums, rounded to bf16 on load") != std::string::npos);
          if (batch == 8 && bias && b.subsymbols.front().outputs.front().size(1) == 256)
            MESSAGE("the bf16 forward's first layer:\n" << fwd.str().substr(fwd.str().find(b.fusion_name + "("), 700)
                                                        << "\n" << jit::kernel_source(b));
        }

      // Eval: no dropout; the ReLU alone in the store.
      fused_net->eval();
      plain_net->eval();
      NoGradGuard ng;
      CHECK(same_bits(fused(x), plain(x)));
      CHECK(bf16_linear_regions(jit::last_traces(fused).back()) == std::vector<Shape>{{batch, 256}, {batch, 200}});
    }
  clear_autocast_cache();
}

TEST_CASE("linear epilogue bf16: a compiled bf16 MLP step over several steps equals the step without the pass") {
  using namespace volt::testing::epilogue_mlp;
  for (int64_t batch : {8, 80})
    for (bool bias : {true, false}) {
      CAPTURE(batch);
      CAPTURE(bias);
      jit::StepOptions fused_options, plain_options, unplanned_options;
      fused_options.autocast = plain_options.autocast = unplanned_options.autocast = DType::bf16;
      plain_options.gemm_epilogues = false;
      unplanned_options.memory_plan = false;  // the regions run by the fusion executor instead
      std::unique_ptr<jit::CompiledStep> step, plain_step;
      const Run fused = train(batch, 5, &fused_options, &step, bias);
      const Run plain = train(batch, 5, &plain_options, &plain_step, bias);
      const Run unplanned = train(batch, 5, &unplanned_options, nullptr, bias);
      CHECK(loss_diff(fused, plain) == 0);
      CHECK(param_diff(fused, plain) == 0);
      CHECK(param_diff(unplanned, plain) == 0);
      CHECK(fused.losses.back() != fused.losses.front());
      // The hidden layer's linear heads its ReLU-and-dropout region; the
      // logits' one heads the loss's row region (its log-softmax).
      const jit::Trace& last = step->last_traces().back();
      CHECK(bf16_linear_regions(last) == std::vector<Shape>{{batch, 200}, {batch, 5}});
      CHECK(bf16_linear_regions(plain_step->last_traces().back()).empty());
      check_traces(step->last_traces());
    }
}

TEST_CASE("linear epilogue bf16: the lazy device's bf16 forward in the linear's store, the bits of eager bf16") {
  // Eager bf16 runs each hidden layer as linear_relu_dropout, the bits of the
  // unfused chain; the lazy device compiles the same graph with the pass.
  // (With autograd recording, every layer's output is saved for backward and
  // so is an output of the forward's graph, which no rewrite may fold: the
  // forward runs under NoGradGuard here, and a training step as one graph below.)
  for (int64_t batch : {8, 96}) {
    CAPTURE(batch);
    clear_autocast_cache();
    auto eager_net = make_mlp(true), lazy_net = make_mlp(true);
    lazy_net->to(kLazy);
    manual_seed(33);
    const Tensor x = Tensor::randn({batch, 300});
    const PhiloxState st = rng_state();
    NoGradGuard ng;
    AutocastGuard amp(kBF16);
    const Tensor want = (*eager_net)(x);
    set_rng_state(st);
    const Tensor got = (*lazy_net)(x.to(kLazy));
    lazy::mark_step();
    CHECK(got.dtype() == DType::bf16);
    CHECK(same_bits(got.to(kCPU), want));
    CHECK(bf16_linear_regions(lazy::last_compiled_traces().back()) ==
          std::vector<Shape>{{batch, 256}, {batch, 200}, {batch, 5}});
  }
  clear_autocast_cache();
}

TEST_CASE("linear epilogue bf16: a lazy bf16 training step holds the fused forward and tracks eager bf16") {
  clear_autocast_cache();
  auto eager_net = make_mlp(true), lazy_net = make_mlp(true);
  lazy_net->to(kLazy);
  nn::Adam eager_opt(eager_net->parameters(), {.lr = 1e-3}), lazy_opt(lazy_net->parameters(), {.lr = 1e-3});
  manual_seed(34);
  const Tensor x = Tensor::randn({8, 300}), y = Tensor::randint(0, 5, {8});
  const Tensor xl = x.to(kLazy), yl = y.to(kLazy);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const PhiloxState st = rng_state();
    double le, ll;
    {
      AutocastGuard amp(kBF16);
      Tensor loss = cross_entropy((*eager_net)(x), y);
      eager_opt.zero_grad();
      loss.backward();
      eager_opt.step();
      le = loss.item_double();
    }
    set_rng_state(st);
    {
      AutocastGuard amp(kBF16);
      Tensor loss = cross_entropy((*lazy_net)(xl), yl);
      lazy_opt.zero_grad();
      loss.backward();
      lazy_opt.step();
      lazy::mark_step();
      ll = loss.to(kCPU).item_double();
    }
    // The same forward bits; the backward's sums (eager's fused ReLU-dropout
    // gradient against the graph's prims) agree to f32 rounding.
    CHECK(std::fabs(le - ll) <= 1e-6 * std::fabs(le));
    // The step's graph: the hidden layers' forwards in their linears' store.
    CHECK(bf16_linear_regions(lazy::last_compiled_traces().back()).size() >= 2);
  }
  // Adam divides by the root of the second moment, so a gradient element
  // near zero moves its weight by up to lr either way: within 1e-4 after
  // three steps of lr 1e-3 (measured: 4.4e-6).
  const auto pe = eager_net->parameters(), pl = lazy_net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(max_abs_diff(pl[i].to(kCPU), pe[i]) <= 1e-4);
  clear_autocast_cache();
}

TEST_CASE("linear epilogue bf16: the GPT's bf16 linears (3-D input) under the jit, against the unfused jit and eager bf16") {
  auto make_gpt = [] {
    manual_seed(41);
    return std::make_shared<nn::GPT>(
        nn::GPTConfig{.block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32});
  };
  auto jit_loss = [](const std::shared_ptr<nn::GPT>& gpt, bool epilogues) {
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (auto& [n, p] : gpt->named_parameters()) {
      params.push_back(p);
      names.push_back(jit::proxy_name_for(n));
    }
    return jit::JitFunction(
        [gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
        {"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); }, bf16_options(epilogues));
  };
  clear_autocast_cache();
  auto fused_gpt = make_gpt(), plain_gpt = make_gpt(), eager_gpt = make_gpt();
  auto fused = jit_loss(fused_gpt, true), plain = jit_loss(plain_gpt, false);
  manual_seed(42);
  const Tensor idx = Tensor::randint(0, 64, {4, 16}), targets = Tensor::randint(0, 64, {4, 16});
  const Tensor lf = fused({idx, targets})[0];
  lf.backward();
  const Tensor lp = plain({idx, targets})[0];
  lp.backward();
  Tensor le;
  {
    AutocastGuard amp(kBF16);
    le = eager_gpt->forward(idx, targets).loss;
  }
  le.backward();
  CHECK(same_bits(lf, lp));
  // Eager bf16 computes attention by its decomposition (the jit: flash, in
  // f32 inside its tiles) and sums in another order: within 1e-3 of the loss
  // (about 4.2) and 2e-2 of the largest gradient element.
  CHECK(std::fabs(lf.item_double() - le.item_double()) < 1e-3);
  const auto pf = fused_gpt->parameters(), pp = plain_gpt->parameters(), pe = eager_gpt->parameters();
  for (size_t i = 0; i < pf.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(pf[i].grad(), pp[i].grad()));
    const double scale = max_abs_diff(pe[i].grad(), zeros_like(pe[i].grad()));
    CHECK(max_abs_diff(pf[i].grad(), pe[i].grad()) <= 2e-2 * scale + 1e-6);
  }
  const std::vector<Shape> regions = bf16_linear_regions(jit::last_traces(fused).back());
  // Each block's c_fc heads its GELU's region, and each c_proj the next
  // LayerNorm's row region, which holds the residual add
  // (tests/jit/rewrites/test_residual_layernorm_bf16.cpp).
  CHECK(regions == std::vector<Shape>{{4, 16, 32}, {4, 16, 128}, {4, 16, 32}, {4, 16, 32}, {4, 16, 128}, {4, 16, 32}});
  CHECK(bf16_linear_regions(jit::last_traces(plain).back()).empty());
  check_traces(jit::last_traces(fused));
  clear_autocast_cache();
}
