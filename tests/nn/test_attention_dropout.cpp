// Attention with dropout run whole by the flash executor in compile_step and
// on the lazy device (and on CUDA devices): the same Philox counters as eager
// mode's decomposition, so the same masks, outputs, gradients and parameters
// as eager training from the same seed; a new mask every step; and no
// (B, H, L, S) tensor anywhere in the programs that ran.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/jit/lazy/lazy.h>
#include <volt/jit/passes.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/gpt.h>
#include <volt/nn/optim.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#ifdef VOLT_WITH_CUDA
#include "cuda/skip_without_gpu.h"
#endif
#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

constexpr int64_t kB = 2, kH = 3, kT = 37, kE = 8;  // T is no multiple of any tile (CPU 32/64, CUDA 32/64)
constexpr int kSteps = 3;
constexpr double kP = 0.1;

// Attention with dropout kP at the default scale, causal or not.
AttentionOptions with_dropout(bool causal) { return {.causal = causal, .scale = std::nullopt, .dropout_p = kP}; }

struct Inputs {
  Tensor q, k, v, g;
};

Inputs make_inputs() {
  manual_seed(3);
  return {Tensor::randn({kB, kH, kT, kE}), Tensor::randn({kB, kH, kT, kE}), Tensor::randn({kB, kH, kT, kE}),
          Tensor::randn({kB, kH, kT, kE})};
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Whether any op of the traces (inside fusions too) makes a (B, H, L, S) tensor:
// the attention weights, their mask or its draw.
bool makes_weights(const std::vector<jit::Trace>& traces, int64_t batch, int64_t heads, int64_t T) {
  const Shape weights{batch, heads, T, T};
  for (const jit::Trace& t : traces)
    for (const jit::BoundSymbol& top : t.bsyms)
      for (const jit::BoundSymbol& b : jit::flatten_to_prims({top}))
        for (const Tensor& o : b.outputs)
          if (o.defined() && o.sizes() == weights) return true;
  return false;
}

// q, k and v trained by SGD on sum(attention(q, k, v) * g), eagerly or as one
// compiled step; the losses of every step and the final q, k, v.
struct Run {
  std::vector<double> losses;
  std::vector<Tensor> qkv;
  std::vector<jit::Trace> traces;
  bool as_graph = false;
};

Run train_qkv(const Inputs& in, bool causal, double lr, bool compiled, Device device = kCPU) {
  manual_seed(13);
  Tensor q = in.q.to(device).clone().requires_grad_(), k = in.k.to(device).clone().requires_grad_(),
         v = in.v.to(device).clone().requires_grad_();
  nn::SGD opt({q, k, v}, {.lr = lr});
  auto step = [&](const Tensor& g) {
    Tensor loss = sum(mul(scaled_dot_product_attention(q, k, v, with_dropout(causal)), g));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  Run r;
  const Tensor g = in.g.to(device);
  if (!compiled) {
    for (int i = 0; i < kSteps; ++i) r.losses.push_back(step(g).item<double>());
  } else {
    jit::CompiledStep s = jit::compile_step(step, {.state = {opt}});
    for (int i = 0; i < kSteps; ++i) r.losses.push_back(s(g).item<double>());
    r.traces = s.last_traces();
    r.as_graph = s.ran_as_graph();
    CHECK(s.compiles() == 1);
  }
  for (const Tensor& t : {q, k, v}) r.qkv.push_back(t.detach().to(kCPU));
  return r;
}

void check_same(const Run& got, const Run& want) {
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got.losses[i] - want.losses[i]) < 1e-4 * (1 + std::fabs(want.losses[i])));
  }
  for (size_t i = 0; i < want.qkv.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(got.qkv[i], want.qkv[i]) < 1e-5);
  }
}

void check_flash_claimed(const std::vector<jit::Trace>& traces) {
  REQUIRE_FALSE(traces.empty());
  const std::string last = traces.back().str();
  CHECK(has(last, "flash_attention("));
  CHECK(has(last, "flash_attention_backward("));
  CHECK(has(last, "dropout_p=0.1"));
  CHECK_FALSE(makes_weights({traces.back()}, kB, kH, kT));
  // The first trace holds the op whole, its decomposition (the mask's draw) underneath.
  CHECK(makes_weights({traces.front()}, kB, kH, kT));
}

// The eager reference for one forward and backward: output and q, k, v gradients.
std::vector<Tensor> eager_grads(const Inputs& in, bool causal) {
  Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(), v = in.v.detach().requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, with_dropout(causal));
  sum(mul(out, in.g)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_all(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(what[i]);
    CHECK(max_abs_diff(got[i].to(kCPU), want[i]) < 1e-5);
  }
}

}  // namespace

TEST_CASE("attention dropout: compile_step runs it by flash with eager's masks, a new one every step") {
  const Inputs in = make_inputs();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Run eager = train_qkv(in, causal, 0.5, false);
    const Run step = train_qkv(in, causal, 0.5, true);
    check_same(step, eager);
    check_flash_claimed(step.traces);
    // lr 0: the same inputs every step, so only the mask tells the steps apart.
    const Run still = train_qkv(in, causal, 0.0, true);
    check_same(still, train_qkv(in, causal, 0.0, false));
    CHECK(std::fabs(still.losses[0] - still.losses[1]) > 1e-3);
    CHECK(std::fabs(still.losses[1] - still.losses[2]) > 1e-3);
  }
}

TEST_CASE("attention dropout: the lazy device runs it by flash with eager's masks, forward and backward") {
  lazy::mark_step();
  const Inputs in = make_inputs();
  for (bool causal : {false, true})
    for (bool cut : {false, true}) {  // cut: the loss is read between forward and backward
      CAPTURE(causal);
      CAPTURE(cut);
      manual_seed(17);
      const std::vector<Tensor> eager1 = eager_grads(in, causal), eager2 = eager_grads(in, causal);
      CHECK(max_abs_diff(eager1[0], eager2[0]) > 1e-2);  // two draws, two masks
      manual_seed(17);
      std::string traces;
      for (const std::vector<Tensor>* want : {&eager1, &eager2}) {
        Tensor q = in.q.to(kLazy).detach().requires_grad_(), k = in.k.to(kLazy).detach().requires_grad_(),
               v = in.v.to(kLazy).detach().requires_grad_();
        Tensor out = scaled_dot_product_attention(q, k, v, with_dropout(causal));
        Tensor loss = sum(mul(out, in.g.to(kLazy)));
        if (cut) {
          CHECK(std::fabs(loss.item<double>() - sum(mul((*want)[0], in.g)).item<double>()) < 1e-3);
          for (const jit::Trace& t : lazy::last_compiled_traces()) traces += t.str();
        }
        loss.backward();
        lazy::mark_step();
        check_all({out, q.grad(), k.grad(), v.grad()}, *want);
        for (const jit::Trace& t : lazy::last_compiled_traces()) traces += t.str();
        CHECK_FALSE(makes_weights({lazy::last_compiled_traces().back()}, kB, kH, kT));
      }
      CHECK(has(traces, "flash_attention("));
      CHECK(has(traces, "flash_attention_backward("));
      CHECK(has(traces, "dropout_p=0.1"));
    }
}

namespace {

// A 1-layer GPT with dropout 0.1 (in attention, after it and after the MLP)
// trained by AdamW, eagerly, as a compiled step or on the lazy device.
enum class Mode { Eager, Step, Lazy };

struct GPTRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  std::vector<jit::Trace> traces;
};

GPTRun train_gpt(Mode mode) {
  constexpr int64_t batch = 2, T = 37, vocab = 32;
  manual_seed(5);
  auto gpt = std::make_shared<nn::GPT>(nn::GPTConfig{
      .block_size = 40, .vocab_size = vocab, .n_layer = 1, .n_head = 2, .n_embd = 16, .dropout = 0.1});
  manual_seed(9);
  const Tensor x = Tensor::randint(0, vocab, {batch, T}), y = Tensor::randint(0, vocab, {batch, T});
  if (mode == Mode::Lazy) gpt->to(kLazy);
  nn::AdamW opt(gpt->parameters(), nn::AdamWOptions{.lr = 1e-3});
  auto step = [&](const Tensor& a, const Tensor& b) {
    Tensor loss = gpt->forward(a, b).loss;
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  manual_seed(23);
  GPTRun r;
  std::unique_ptr<jit::CompiledStep> s;
  if (mode == Mode::Step) s = std::make_unique<jit::CompiledStep>(jit::compile_step(step, {.state = {*gpt, opt}}));
  std::vector<Tensor> losses;
  for (int i = 0; i < kSteps; ++i) {
    if (mode == Mode::Step) losses.push_back((*s)(x, y));
    if (mode == Mode::Eager) losses.push_back(step(x, y));
    if (mode == Mode::Lazy) {
      losses.push_back(step(x.to(kLazy), y.to(kLazy)));
      lazy::mark_step();
      r.traces.push_back(lazy::last_compiled_traces().back());  // what ran
    }
  }
  if (s) r.traces = s->last_traces();
  for (const Tensor& l : losses) r.losses.push_back(l.item<double>());
  for (const Tensor& p : gpt->parameters()) r.params.push_back(p.detach().to(kCPU));
  return r;
}

}  // namespace

TEST_CASE("attention dropout: a GPT with dropout 0.1 trains the same as eager as a compiled step and lazily") {
  lazy::mark_step();
  const GPTRun eager = train_gpt(Mode::Eager);
  for (Mode mode : {Mode::Step, Mode::Lazy}) {
    CAPTURE(mode == Mode::Step ? "compile_step" : "lazy");
    const GPTRun got = train_gpt(mode);
    for (int i = 0; i < kSteps; ++i) CHECK(std::fabs(got.losses[i] - eager.losses[i]) < 1e-5);
    REQUIRE(got.params.size() == eager.params.size());
    for (size_t i = 0; i < eager.params.size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(got.params[i], eager.params[i]) < 1e-5);
    }
    REQUIRE_FALSE(got.traces.empty());
    std::string text;
    for (const jit::Trace& t : got.traces) text += t.str();
    CHECK(has(text, "flash_attention("));
    CHECK(has(text, "flash_attention_backward("));
    CHECK(has(text, "dropout_p=0.1"));
    // The weights (2, 2, 37, 37) are made nowhere in what ran.
    const std::vector<jit::Trace> ran = mode == Mode::Step ? std::vector<jit::Trace>{got.traces.back()} : got.traces;
    CHECK_FALSE(makes_weights(ran, 2, 2, 37));
  }
}

#ifdef VOLT_WITH_CUDA

TEST_CASE("cuda: attention dropout: the compiled step on the GPU draws eager CPU's masks, a new one every replay") {
  SKIP_WITHOUT_GPU();
  const Inputs in = make_inputs();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Run step = train_qkv(in, causal, 0.5, true, Device::cuda(0));
    check_same(step, train_qkv(in, causal, 0.5, false));
    check_flash_claimed(step.traces);
    CHECK(step.as_graph);  // replays read the Philox word, so each draws its own mask
    const Run still = train_qkv(in, causal, 0.0, true, Device::cuda(0));
    check_same(still, train_qkv(in, causal, 0.0, false));
    CHECK(std::fabs(still.losses[1] - still.losses[2]) > 1e-3);
  }
}

TEST_CASE("lazy: the CUDA backend runs attention with dropout by flash, with eager CPU's masks") {
  if (!cuda::is_available()) {
    MESSAGE("skipped: no CUDA backend or GPU here");
    return;
  }
  lazy::mark_step();
  lazy::set_backend(Device::cuda(0));
  const Inputs in = make_inputs();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    manual_seed(17);
    const std::vector<Tensor> eager = eager_grads(in, causal);
    manual_seed(17);
    Tensor q = in.q.to(kLazy).detach().requires_grad_(), k = in.k.to(kLazy).detach().requires_grad_(),
           v = in.v.to(kLazy).detach().requires_grad_();
    Tensor out = scaled_dot_product_attention(q, k, v, with_dropout(causal));
    sum(mul(out, in.g.to(kLazy))).backward();
    lazy::mark_step();
    check_all({out, q.grad(), k.grad(), v.grad()}, eager);
    const std::string trace = lazy::last_compiled_traces().back().str();
    CHECK(has(trace, "flash_attention("));
    CHECK(has(trace, "flash_attention_backward("));
  }
  lazy::set_backend(kCPU);
}

#endif
