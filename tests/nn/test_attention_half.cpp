// The flash kernels on bf16 and f16 operands (the CPU): computed in f32 inside
// the tiles, so on 16-bit inputs they equal the f32 kernels run on the same
// values widened, with out, dq, dk and dv rounded once (bit for bit), and a
// naive f64 loop to within that one rounding; under autocast the module jit
// and compile_step hand the 16-bit attention to flash instead of decomposing it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <volt/jit/flash_attention.h>
#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/optim.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Unit roundoff of the 16-bit types (8 and 11 significant bits).
double unit_roundoff(DType t) { return t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// (B, H, T, E) values drawn in f32 and rounded to `dt` (and a v/g one wider, Ev = E + 1).
struct Half {
  Tensor q, k, v, g;
};
Half make(int64_t L, int64_t S, int64_t E, DType dt, uint64_t seed) {
  manual_seed(seed);
  return {Tensor::randn({2, 3, L, E}).to(dt), Tensor::randn({2, 3, S, E}).to(dt),
          Tensor::randn({2, 3, S, E + 1}).to(dt), Tensor::randn({2, 3, L, E + 1}).to(dt)};
}
Tensor f32(const Tensor& t) { return t.to(DType::f32); }

// out = softmax(scale q k^T, causal) v in f64, by the definition.
std::vector<double> naive_out(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t BH = q.size(0) * q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  const auto Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>();
  std::vector<double> out(BH * L * Ev, 0.0);
  for (int64_t b = 0; b < BH; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> p(S, -INFINITY);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < (causal ? std::min(i + 1, S) : S); ++j) {
        double s = 0;
        for (int64_t e = 0; e < E; ++e) s += Q[(b * L + i) * E + e] * K[(b * S + j) * E + e];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < S; ++j) sum += (p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) out[(b * L + i) * Ev + e] += p[j] / sum * V[(b * S + j) * Ev + e];
    }
  return out;
}

// The elements farther from `want` than one rounding into the 16-bit type (u |want|) plus `slack`.
int64_t beyond_one_rounding(const Tensor& got, const std::vector<double>& want, double u, double slack) {
  const auto g = got.to_vector<double>();
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += std::fabs(g[i] - want[i]) > u * std::fabs(want[i]) + slack;
  return bad;
}

}  // namespace

TEST_CASE("attention half: flash on bf16/f16 equals the f32 kernels on the widened values, rounded once") {
  for (DType dt : {DType::bf16, DType::f16})
    for (auto [L, S] : {std::pair<int64_t, int64_t>{1, 1}, {7, 7}, {33, 33}, {130, 130}, {7, 33}, {33, 7}})
      for (int64_t E : {5, 32})
        for (bool causal : {false, true}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(L);
          CAPTURE(S);
          CAPTURE(E);
          CAPTURE(causal);
          const Half h = make(L, S, E, dt, 7);
          const double scale = 1.0 / std::sqrt(static_cast<double>(E));
          const FlashParams p{.causal = causal, .scale = scale, .dropout_p = L == 33 ? 0.25 : 0.0, .seed = 3};
          const std::vector<Tensor> fwd = flash_attention_forward(h.q, h.k, h.v, p);
          const std::vector<Tensor> ref = flash_attention_forward(f32(h.q), f32(h.k), f32(h.v), p);
          REQUIRE(fwd[0].dtype() == dt);
          REQUIRE(fwd[1].dtype() == DType::f32);  // lse
          CHECK(max_abs_diff(f32(fwd[0]), f32(ref[0].to(dt))) == 0);
          CHECK(max_abs_diff(fwd[1], ref[1]) == 0);
          const std::vector<Tensor> bwd = flash_attention_backward(h.g, h.q, h.k, h.v, fwd[0], fwd[1], p);
          const std::vector<Tensor> bref =
              flash_attention_backward(f32(h.g), f32(h.q), f32(h.k), f32(h.v), f32(fwd[0]), fwd[1], p);
          for (size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(bwd[i].dtype() == dt);
            CHECK(max_abs_diff(f32(bwd[i]), f32(bref[i].to(dt))) == 0);
          }
          // Against f64 on the same 16-bit values: one rounding, plus f32's sums.
          if (p.dropout_p == 0)
            CHECK(beyond_one_rounding(fwd[0], naive_out(h.q, h.k, h.v, causal, scale), unit_roundoff(dt), 2e-5) == 0);
        }
}

TEST_CASE("attention half: a 16-bit lse, or bf16 flash off the CPU, is an error naming the kernel") {
  const Half h = make(4, 4, 8, DType::bf16, 1);
  const FlashParams p{.scale = 0.3};
  const std::vector<Tensor> fwd = flash_attention_forward(h.q, h.k, h.v, p);
  try {
    flash_attention_backward(h.g, h.q, h.k, h.v, fwd[0], fwd[1].to(DType::bf16), p);
    FAIL("no error for a bf16 lse");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(has(e.what(), "flash_attention_backward"));
    CHECK(has(e.what(), "expected lse f32"));
  }
  try {
    flash_attention_forward(h.q.to(kLazy), h.k.to(kLazy), h.v.to(kLazy), p);
    FAIL("no error for lazy bf16");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(has(e.what(), "flash_attention"));
    CHECK(has(e.what(), "bf16 and f16 on the CPU"));
  }
}

// f32 leaves, autocast to bf16: the casts feed flash, whose bf16 output and
// gradients are the f32 kernels' on the rounded values, rounded once.
TEST_CASE("attention half: under bf16 autocast the module jit runs flash, equal to the f32 kernels rounded") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Half h = make(33, 33, 7, DType::bf16, 11);
    const Tensor q0 = f32(h.q), k0 = f32(h.k), v0 = f32(h.v), g = f32(h.g);  // exactly bf16 values
    auto run = [&](bool with_flash, std::string* trace) {
      if (!with_flash) jit::remove_default_executor(jit::flash_executor());
      jit::JitFunction f = jit::jit([causal](const std::vector<Tensor>& a) {
                             return std::vector<Tensor>{scaled_dot_product_attention(a[0], a[1], a[2], {.causal = causal})};
                           }).with_autocast(DType::bf16);
      if (!with_flash) jit::add_default_executor(jit::flash_executor());
      Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
      Tensor out = f({q, k, v}).at(0);
      sum(mul(out, g)).backward();
      *trace = jit::last_traces(f).back().str() + jit::last_backward_traces(f).back().str();
      return std::vector<Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
    };
    std::string flash_trace, plain_trace;
    const std::vector<Tensor> got = run(true, &flash_trace), plain = run(false, &plain_trace);
    CHECK(got[0].dtype() == DType::bf16);
    CHECK(has(flash_trace, "flash_attention("));
    CHECK(has(flash_trace, "flash_attention_backward("));
    CHECK(has(flash_trace, "bf16[2, 3, 33, 8]"));  // the output, in bf16
    CHECK(has(flash_trace, "f32[2, 3, 33]"));      // lse stays f32
    CHECK_FALSE(has(plain_trace, "flash_attention"));
    const FlashParams p{.causal = causal, .scale = 1.0 / std::sqrt(7.0)};
    const std::vector<Tensor> fwd = flash_attention_forward(q0, k0, v0, p);
    const Tensor out = fwd[0].to(DType::bf16);
    const std::vector<Tensor> bwd = flash_attention_backward(g, q0, k0, v0, f32(out), fwd[1], p);
    CHECK(max_abs_diff(f32(got[0]), f32(out)) == 0);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(got[i + 1].dtype() == DType::f32);  // the leaves' gradients, cast back
      CHECK(max_abs_diff(got[i + 1], f32(bwd[i].to(DType::bf16))) == 0);
      // The decomposition (bf16 matmuls, f32 softmax, P rounded to bf16) agrees to a few bf16 ulps.
      CHECK(max_abs_diff(got[i + 1], plain[i + 1]) < 0.05);
    }
    CHECK(max_abs_diff(f32(got[0]), f32(plain[0])) < 0.05);
  }
}

// compile_step traced under bf16 autocast records attention whole on bf16
// operands; flash takes both directions.  3 SGD steps track the f32 step.
TEST_CASE("attention half: compile_step under bf16 autocast runs flash and tracks the f32 step") {
  const Half h = make(33, 33, 7, DType::bf16, 13);
  auto run = [&](std::optional<DType> amp, std::string* trace) {
    Tensor q = f32(h.q).requires_grad_(), k = f32(h.k).requires_grad_(), v = f32(h.v).requires_grad_();
    const Tensor g = f32(h.g);
    nn::SGD opt({q, k, v}, {.lr = 0.5});
    auto step = [&](const Tensor& gg) {
      Tensor loss = sum(mul(scaled_dot_product_attention(q, k, v, {.causal = true}), gg));
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    jit::CompiledStep s = jit::compile_step(step, {.state = {opt}, .autocast = amp});
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(s(g).item<double>());
    *trace = s.last_trace_str();
    return losses;
  };
  std::string t16, t32;
  const std::vector<double> low = run(DType::bf16, &t16), wide = run(std::nullopt, &t32);
  CHECK(has(t16, "flash_attention("));
  CHECK(has(t16, "flash_attention_backward("));
  CHECK(has(t16, "bf16"));
  for (size_t i = 0; i < low.size(); ++i) CHECK(std::fabs(low[i] - wide[i]) < 0.02 * (1 + std::fabs(wide[i])));
}
