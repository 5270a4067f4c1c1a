// scaled_dot_product_attention: the composite (eager, its decomposition) and
// the flash executor's tiled kernels against naive f64 loops, against each
// other (outputs, q/k/v gradients, dropout masks), under the module jit,
// compile_step and the lazy device, and the GPT's trace showing flash.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/autograd/gradcheck.h>
#include <volt/jit/flash_attention.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/gpt.h>
#include <volt/nn/optim.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

// out and the gradients of sum(out * g), by the definition, in f64.
struct Naive {
  std::vector<double> out, dq, dk, dv;
};

Naive naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, bool causal, double scale) {
  const int64_t BH = q.size(0) * q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  const auto Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>(), G = g.to_vector<double>();
  Naive r{std::vector<double>(BH * L * Ev), std::vector<double>(BH * L * E), std::vector<double>(BH * S * E),
          std::vector<double>(BH * S * Ev)};
  for (int64_t b = 0; b < BH; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> p(S, 0.0), dp(S, 0.0);
      double mx = -INFINITY, sum = 0, D = 0;
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > i) continue;
        double s = 0;
        for (int64_t e = 0; e < E; ++e) s += Q[(b * L + i) * E + e] * K[(b * S + j) * E + e];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < S; ++j) sum += (causal && j > i) ? 0 : (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j < S; ++j) p[j] = (causal && j > i) ? 0 : p[j] / sum;
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) {
          r.out[(b * L + i) * Ev + e] += p[j] * V[(b * S + j) * Ev + e];
          r.dv[(b * S + j) * Ev + e] += p[j] * G[(b * L + i) * Ev + e];
          dp[j] += G[(b * L + i) * Ev + e] * V[(b * S + j) * Ev + e];
        }
      for (int64_t j = 0; j < S; ++j) D += p[j] * dp[j];
      for (int64_t j = 0; j < S; ++j) {
        const double ds = p[j] * (dp[j] - D) * scale;
        for (int64_t e = 0; e < E; ++e) {
          r.dq[(b * L + i) * E + e] += ds * K[(b * S + j) * E + e];
          r.dk[(b * S + j) * E + e] += ds * Q[(b * L + i) * E + e];
        }
      }
    }
  return r;
}

double worst(const Tensor& got, const std::vector<double>& want) {
  return volt::testing::max_abs_diff(got.to_vector<double>(), want);
}

struct Inputs {
  Tensor q, k, v, g;
};

Inputs make_inputs(int64_t L, int64_t S, int64_t E, DType dt, uint64_t seed = 3) {
  manual_seed(seed);
  return {Tensor::randn({2, 3, L, E}, dt), Tensor::randn({2, 3, S, E}, dt), Tensor::randn({2, 3, S, E + 1}, dt),
          Tensor::randn({2, 3, L, E + 1}, dt)};
}

// The composite run eagerly (its decomposition, differentiated by autograd).
std::vector<Tensor> eager_with_grads(const Inputs& in, const AttentionOptions& o) {
  Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(), v = in.v.detach().requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  sum(mul(out, in.g)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// f(q, k, v) jitted (with the default executors, flash among them, or without flash).
jit::JitFunction jitted(const AttentionOptions& o, bool with_flash) {
  if (!with_flash) jit::remove_default_executor(jit::flash_executor());
  jit::JitFunction f = jit::jit([o](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{scaled_dot_product_attention(a[0], a[1], a[2], o)};
  });
  if (!with_flash) jit::add_default_executor(jit::flash_executor());
  return f;
}

std::vector<Tensor> jit_with_grads(jit::JitFunction& f, const Inputs& in) {
  Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(), v = in.v.detach().requires_grad_();
  Tensor out = f({q, k, v}).at(0);
  sum(mul(out, in.g)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_all(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol) {
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(what[i]);
    CHECK(max_abs_diff(got[i], want[i]) < tol);
  }
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("attention: the composite and the flash kernels equal naive f64 loops, causal or not, any T") {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (auto [L, S] : {std::pair<int64_t, int64_t>{1, 1}, {7, 7}, {33, 33}, {130, 130}, {7, 33}, {33, 7}})
      for (int64_t E : {5, 16})
        for (bool causal : {false, true}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(L);
          CAPTURE(S);
          CAPTURE(E);
          CAPTURE(causal);
          const Inputs in = make_inputs(L, S, E, dt);
          const double scale = 1.0 / std::sqrt(static_cast<double>(E));
          const Naive want = naive_attention(in.q, in.k, in.v, in.g, causal, scale);
          const std::vector<Tensor> eager = eager_with_grads(in, {.causal = causal});
          CHECK(worst(eager[0], want.out) < tol);
          CHECK(worst(eager[1], want.dq) < tol);
          CHECK(worst(eager[2], want.dk) < tol);
          CHECK(worst(eager[3], want.dv) < tol);
          const FlashParams p{.causal = causal, .scale = scale};
          std::vector<Tensor> fwd = flash_attention_forward(in.q, in.k, in.v, p);
          std::vector<Tensor> bwd = flash_attention_backward(in.g, in.q, in.k, in.v, fwd[0], fwd[1], p);
          CHECK(worst(fwd[0], want.out) < tol);
          CHECK(worst(bwd[0], want.dq) < tol);
          CHECK(worst(bwd[1], want.dk) < tol);
          CHECK(worst(bwd[2], want.dv) < tol);
          // The executor against the decomposition: 1e-5 in f32.
          check_all({fwd[0], bwd[0], bwd[1], bwd[2]}, eager, dt == DType::f32 ? 1e-5 : 1e-12);
        }
  }
}

TEST_CASE("attention: the backward op's decomposition equals autograd through the forward's") {
  const Inputs in = make_inputs(9, 9, 4, DType::f64);
  for (bool causal : {false, true}) {
    const std::vector<Tensor> eager = eager_with_grads(in, {.causal = causal, .scale = 0.3});
    std::vector<Tensor> grads =
        scaled_dot_product_attention_backward(in.g, in.q, in.k, in.v, {.causal = causal, .scale = 0.3});
    check_all({eager[0], grads[0], grads[1], grads[2]}, eager, 1e-12);
  }
}

TEST_CASE("attention: the module jit runs it by flash, equal to eager and to the jit without flash") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Inputs in = make_inputs(33, 33, 7, DType::f32);
    const std::vector<Tensor> eager = eager_with_grads(in, {.causal = causal});
    jit::JitFunction with = jitted({.causal = causal}, true), without = jitted({.causal = causal}, false);
    check_all(jit_with_grads(with, in), eager, 1e-5);
    check_all(jit_with_grads(without, in), eager, 1e-5);
    const std::string fwd = jit::last_traces(with).back().str(), bwd = jit::last_backward_traces(with).back().str();
    CHECK(has(fwd, "flash_attention("));
    CHECK(has(bwd, "flash_attention_backward("));
    CHECK_FALSE(has(fwd, "softmax"));
    const std::string plain = jit::last_traces(without).back().str();
    CHECK_FALSE(has(plain, "flash_attention"));
    CHECK(has(plain, "matmul("));  // the decomposition: the score matmul among its prims
    CHECK(has(jit::last_traces(without).front().str(), "scaled_dot_product_attention("));
    // Without gradients the forward alone: the execution transform.
    NoGradGuard no_grad;
    jit::JitFunction inference = jitted({.causal = causal}, true);
    CHECK(max_abs_diff(inference({in.q, in.k, in.v}).at(0), eager[0]) < 1e-5);
    CHECK(has(jit::last_traces(inference).back().str(), "flash_attention("));
  }
}

TEST_CASE("attention: dropout inside flash draws the decomposition's mask (same seed, same outputs and grads)") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Inputs in = make_inputs(33, 33, 7, DType::f32);
    const AttentionOptions o{.causal = causal, .dropout_p = 0.3};
    manual_seed(11);
    const std::vector<Tensor> eager = eager_with_grads(in, o);
    jit::JitFunction with = jitted(o, true), without = jitted(o, false);
    manual_seed(11);
    const std::vector<Tensor> flash = jit_with_grads(with, in);
    manual_seed(11);
    const std::vector<Tensor> plain = jit_with_grads(without, in);
    check_all(flash, eager, 1e-5);
    check_all(plain, eager, 1e-5);
    CHECK(has(jit::last_traces(with).back().str(), "flash_attention("));
    // The mask is not a no-op: without dropout the output differs.
    CHECK(max_abs_diff(eager[0], eager_with_grads(in, {.causal = causal})[0]) > 1e-2);
    // The kernels directly, from the generator's state the decomposition drew from.
    manual_seed(11);
    const PhiloxState st = rng_state();
    const FlashParams p{.causal = causal, .scale = 1 / std::sqrt(7.0), .dropout_p = 0.3, .seed = st.seed, .offset = st.offset};
    CHECK(max_abs_diff(flash_attention_forward(in.q, in.k, in.v, p)[0], eager[0]) < 1e-5);
  }
}

TEST_CASE("attention: gradcheck of the flash executor in f64 against finite differences") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Inputs in = make_inputs(5, 5, 3, DType::f64);
    jit::JitFunction f = jitted({.causal = causal}, true);
    auto fn = [&f](const std::vector<Tensor>& a) { return f({a[0], a[1], a[2]}).at(0); };
    const autograd::GradcheckResult r = autograd::gradcheck(fn, {in.q, in.k, in.v});
    CHECK_MESSAGE(r.ok, r.message);
    jit_with_grads(f, in);  // (gradcheck's last calls are without gradients)
    REQUIRE_FALSE(jit::last_backward_traces(f).empty());
    CHECK(has(jit::last_backward_traces(f).back().str(), "flash_attention_backward("));
  }
}

TEST_CASE("attention: bad inputs are errors naming the op") {
  const Tensor q = Tensor::randn({1, 2, 4, 8}), k = Tensor::randn({1, 2, 4, 8}), v = Tensor::randn({1, 2, 4, 8});
  auto fails = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
    } catch (const Error& e) {
      CAPTURE(e.what());
      CHECK(has(e.what(), "scaled_dot_product_attention"));
      CHECK(has(e.what(), what));
      return;
    }
    FAIL("no error for " << what);
  };
  fails([&] { scaled_dot_product_attention(q.reshape({2, 4, 8}), k, v); }, "(batch, heads, T, head_dim)");
  fails([&] { scaled_dot_product_attention(q, k.to(DType::f64), v); }, "one dtype");
  fails([&] { scaled_dot_product_attention(q, Tensor::randn({1, 2, 4, 7}), v); }, "head_dim");
  fails([&] { scaled_dot_product_attention(q, k, Tensor::randn({1, 2, 5, 8})); }, "positions");
  fails([&] { scaled_dot_product_attention(q, Tensor::randn({1, 3, 4, 8}), v); }, "batch and heads");
  fails([&] { scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5}); }, "dropout_p");
  fails([&] { scaled_dot_product_attention(q, k, v, {.scale = INFINITY}); }, "scale");
  fails([&] { scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)); }, "floating");
  fails([&] { scaled_dot_product_attention(q, k.to(kLazy), v); }, "one device");
}

TEST_CASE("attention: the jitted GPT's traces show attention claimed by flash; equal to eager and to the plain jit") {
  auto make = [] {
    manual_seed(5);
    return std::make_shared<nn::GPT>(
        nn::GPTConfig{.block_size = 16, .vocab_size = 32, .n_layer = 1, .n_head = 2, .n_embd = 16});
  };
  manual_seed(9);
  const Tensor x = Tensor::randint(0, 32, {2, 16}), y = Tensor::randint(0, 32, {2, 16});
  auto loss_of = [&](bool use_jit, bool with_flash, std::string* trace) {
    auto gpt = make();
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (auto& [n, p] : gpt->named_parameters()) {
      params.push_back(p);
      names.push_back(jit::proxy_name_for(n));
    }
    if (!use_jit) return gpt->forward(x, y).loss.item<double>();
    if (!with_flash) jit::remove_default_executor(jit::flash_executor());
    jit::JitFunction f([gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
                       {"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); });
    if (!with_flash) jit::add_default_executor(jit::flash_executor());
    Tensor loss = f({x, y}).at(0);
    loss.backward();
    *trace = jit::last_traces(f).back().str() + jit::last_backward_traces(f).back().str();
    return loss.item<double>();
  };
  std::string with, without;
  const double eager = loss_of(false, false, nullptr);
  CHECK(std::fabs(loss_of(true, true, &with) - eager) < 1e-5);
  CHECK(std::fabs(loss_of(true, false, &without) - eager) < 1e-5);
  CHECK(has(with, "flash_attention(t"));
  CHECK(has(with, "causal=True"));
  CHECK(has(with, "flash_attention_backward("));
  CHECK_FALSE(has(without, "flash_attention"));
}

// The step records the op whole and flash runs both directions; with dropout
// its backward draws the forward's mask again, which is eager's.
TEST_CASE("attention: compile_step runs it by flash and equals eager over 3 SGD steps (and with dropout)") {
  const Inputs in = make_inputs(33, 33, 7, DType::f32);
  for (double p : {0.0, 0.3}) {
    CAPTURE(p);
    auto run = [&](bool compiled, std::string* trace) {
      manual_seed(13);
      Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
      nn::SGD opt({q, k, v}, {.lr = 0.5});
      auto step = [&](const Tensor& g) {
        Tensor loss = sum(mul(scaled_dot_product_attention(q, k, v, {.causal = true, .dropout_p = p}), g));
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      };
      std::vector<double> losses;
      if (!compiled) {
        for (int i = 0; i < 3; ++i) losses.push_back(step(in.g).item<double>());
      } else {
        jit::CompiledStep s = jit::compile_step(step, {.state = {opt}});
        for (int i = 0; i < 3; ++i) losses.push_back(s(in.g).item<double>());
        *trace = s.last_trace_str();
      }
      return std::make_pair(losses, std::vector<Tensor>{q.detach(), k.detach(), v.detach()});
    };
    std::string trace;
    const auto eager = run(false, nullptr);
    const auto step = run(true, &trace);
    for (size_t i = 0; i < eager.first.size(); ++i) CHECK(std::fabs(step.first[i] - eager.first[i]) < 1e-4);
    for (size_t i = 0; i < 3; ++i) CHECK(max_abs_diff(step.second[i], eager.second[i]) < 1e-5);
    CHECK(has(trace, "flash_attention("));
    CHECK(has(trace, "flash_attention_backward("));
  }
}

// The lazy device records attention as one node, and its gradient as another
// (with dropout, the forward's counters); the jit's pipeline compiles the
// graph, so flash runs both.
TEST_CASE("attention: the lazy device runs it by flash, equal to eager, forward and backward (and with dropout)") {
  lazy::mark_step();
  const Inputs in = make_inputs(33, 33, 7, DType::f32);
  for (double p : {0.0, 0.3})
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      CAPTURE(p);
      manual_seed(17);
      const std::vector<Tensor> eager = eager_with_grads(in, {.causal = causal, .dropout_p = p});
      manual_seed(17);
      Tensor q = in.q.to(kLazy).detach().requires_grad_(), k = in.k.to(kLazy).detach().requires_grad_(),
             v = in.v.to(kLazy).detach().requires_grad_();
      Tensor out = scaled_dot_product_attention(q, k, v, {.causal = causal, .dropout_p = p});
      sum(mul(out, in.g.to(kLazy))).backward();
      lazy::mark_step();
      check_all({out.to(kCPU), q.grad().to(kCPU), k.grad().to(kCPU), v.grad().to(kCPU)}, eager, 1e-5);
      std::string traces;
      for (const jit::Trace& t : lazy::last_compiled_traces()) traces += t.str();
      CHECK(has(traces, "flash_attention("));
      CHECK(has(traces, "flash_attention_backward("));
    }
}
