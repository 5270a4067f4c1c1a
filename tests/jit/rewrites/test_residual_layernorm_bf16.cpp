// A transformer block's residual add after a bf16 projection, x + proj(h),
// sits in the next LayerNorm's row region (the sum written once as the new
// residual and normalised in the same pass).  Under bf16 autocast the
// GEMM epilogue pass makes that projection the head of the row region: the
// row kernel reads the GEMM's f32 sums and rounds each to bf16 as it loads
// it (jit/rewrites/gemm_epilogue.h), so the bf16 product is never stored.
// Each fused form must give the bits of the program without the pass: the
// module jit, the compiled step and the lazy device; the whole GPT step in
// each mode stays within a stated distance of eager bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/jit/check.h>
#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/rewrites/column_sum.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/gpt.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;
using volt::testing::max_abs_diff;

namespace {

// The row regions of a trace that begin with a linear, by its product's dtype.
int linear_row_regions(const jit::Trace& t, DType product) {
  int n = 0;
  for (const jit::BoundSymbol& b : t.bsyms)
    if (jit::is_gemm_epilogue(b) && jit::is_row_region(b) && b.subsymbols.front().call.op == OpId::linear &&
        b.subsymbols.front().outputs.front().dtype() == product)
      ++n;
  return n;
}

// The regions of a trace that sum a bf16 value's columns in f32 (jit/rewrites/column_sum.h).
int column_sum_regions(const jit::Trace& t) {
  int n = 0;
  for (const jit::BoundSymbol& b : t.bsyms) n += jit::is_bf16_column_sum(b) ? 1 : 0;
  return n;
}

void check_traces(const std::vector<jit::Trace>& traces) {
  for (const jit::Trace& t : traces) CHECK_MESSAGE(jit::trace_problem(t) == "", t.provenance << ": " << jit::trace_problem(t));
}

// VOLT_JIT_WITHOUT for the scope: the lazy device compiles with the default pipeline.
// (An empty name leaves every pass in.)
struct WithoutPass {
  explicit WithoutPass(const std::string& name) {
    if (!name.empty()) setenv("VOLT_JIT_WITHOUT", name.c_str(), 1);
  }
  ~WithoutPass() { unsetenv("VOLT_JIT_WITHOUT"); }
};

constexpr int64_t kC = 48;

struct BlockParams {
  std::vector<Tensor> all;  // w, b, ln weight, ln bias, w2
};

BlockParams make_params() {
  manual_seed(61);
  BlockParams p;
  for (const Shape& s : std::vector<Shape>{{kC, kC}, {kC}, {kC}, {kC}, {kC, kC}}) {
    Tensor t = Tensor::randn(s);
    if (s.size() == 2) t = mul(t, 0.2);
    p.all.push_back(t.detach().requires_grad_());
  }
  return p;
}

// y = x + proj(h), z = layer_norm(y), out = lin2(z): a block's residual and
// the next LayerNorm feeding the next (bf16) linear.
jit::JitFunction block(const BlockParams& p, std::optional<DType> autocast, bool epilogues) {
  jit::JitOptions o;
  o.autocast = autocast;
  if (!epilogues) o.pipeline.without = {"GEMM epilogues"};
  const std::vector<Tensor> w = p.all;
  return jit::JitFunction(
      [w](const std::vector<Tensor>& in) {
        const Tensor y = add(in[0], linear(in[1], w[0], w[1]));
        const Tensor z = layer_norm(y, {kC}, w[2], w[3]);
        return std::vector<Tensor>{y, linear(z, w[4])};
      },
      {"x", "h"}, w, {"proj_weight", "proj_bias", "ln_weight", "ln_bias", "fc_weight"}, nullptr, o);
}

}  // namespace

TEST_CASE("residual layernorm bf16: the module jit's projection heads the next LayerNorm's row region, bit for bit") {
  for (bool low : {true, false}) {
    CAPTURE(low);
    clear_autocast_cache();
    const BlockParams fp = make_params(), pp = make_params();
    const std::optional<DType> amp = low ? std::optional<DType>(DType::bf16) : std::nullopt;
    auto fused = block(fp, amp, true), plain = block(pp, amp, false);
    manual_seed(62);
    const Tensor x = Tensor::randn({3, 5, kC}), h = Tensor::randn({3, 5, kC});
    for (int call = 0; call < 2; ++call) {  // a trace, then the cached one
      CAPTURE(call);
      const std::vector<Tensor> of = fused({x, h}), op = plain({x, h});
      for (size_t k = 0; k < of.size(); ++k) CHECK(same_bits(of[k], op[k]));
      CHECK(of[1].dtype() == (low ? DType::bf16 : DType::f32));
      add(sum(of[0]), sum(of[1].to(DType::f32))).backward();
      add(sum(op[0]), sum(op[1].to(DType::f32))).backward();
      for (size_t i = 0; i < fp.all.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(fp.all[i].grad(), pp.all[i].grad()));
        fp.all[i].grad().zero_();
        pp.all[i].grad().zero_();
      }
    }
    const jit::Trace& fwd = jit::last_traces(fused).back();
    check_traces(jit::last_traces(fused));
    CHECK(linear_row_regions(jit::last_traces(plain).back(), DType::bf16) == 0);
    // f32 has nothing to gain (the product is an f32 array either way): no f32 linear heads a row region.
    CHECK(linear_row_regions(fwd, DType::f32) == 0);
    if (!low) continue;
    REQUIRE(linear_row_regions(fwd, DType::bf16) == 1);
    for (const jit::BoundSymbol& b : fwd.bsyms)
      if (jit::is_gemm_epilogue(b) && jit::is_row_region(b)) {
        const std::string src = jit::kernel_source(b);
        CHECK(src.find("VOLT_ROW_KERNEL") != std::string::npos);
        CHECK(src.find("f32 sums, rounded to bf16 on load") != std::string::npos);
        MESSAGE("the projection, the residual add and the LayerNorm in one region:\n"
                << fwd.str().substr(fwd.str().find(b.fusion_name + "("), 1400) << "\n"
                << src);
      }
  }
  clear_autocast_cache();
}

namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 4, kBlock = 16, kVocab = 64;

std::shared_ptr<nn::GPT> make_gpt() {
  manual_seed(71);
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.block_size = kBlock, .vocab_size = kVocab, .n_layer = 2, .n_head = 2, .n_embd = 32});
}

std::unique_ptr<nn::AdamW> make_opt(nn::GPT& gpt) {
  return std::make_unique<nn::AdamW>(nn::weight_decay_groups(gpt.parameters(), 0.1),
                                     nn::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches() {
  manual_seed(72);
  std::vector<Batch> r;
  for (int i = 0; i < kSteps; ++i)
    r.push_back({Tensor::randint(0, kVocab, {kBatch, kBlock}), Tensor::randint(0, kVocab, {kBatch, kBlock})});
  return r;
}

using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;

Tensor train_step(const LossFn& loss_of, nn::GPT& gpt, nn::AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = loss_of(x, y);
  opt.zero_grad();
  loss.backward();
  nn::utils::clip_grad_norm_(gpt.parameters(), 1.0);
  opt.step();
  return loss;
}

struct Run {
  std::vector<double> losses;
  std::vector<Tensor> params;
  int fused_rows = 0;   // row regions headed by a bf16 linear in the last compiled trace
  int column_sums = 0;  // bf16 column-sum regions in it
};

// last: the compiled trace (forward and backward), or the module jit's forward
// and `backward` its backward (where the bias gradients are summed).
Run finish(std::vector<double> losses, nn::GPT& gpt, const jit::Trace* last, const jit::Trace* backward = nullptr) {
  Run r{std::move(losses), {}, last ? linear_row_regions(*last, DType::bf16) : 0,
        backward ? column_sum_regions(*backward) : last ? column_sum_regions(*last) : 0};
  for (const Tensor& p : gpt.parameters()) r.params.push_back(p.detach().to(kCPU));
  return r;
}

Run run_eager(const std::vector<Batch>& data) {
  clear_autocast_cache();
  auto gpt = make_gpt();
  auto opt = make_opt(*gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) {
    AutocastGuard amp(kBF16);
    return gpt->forward(x, y).loss;
  };
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x, data[i].y).item<double>());
  return finish(losses, *gpt, nullptr);
}

// Each run leaves out the pass named `without` ("" for none).
Run run_jit(const std::vector<Batch>& data, const std::string& without) {
  WithoutPass off(without);
  clear_autocast_cache();
  auto gpt = make_gpt();
  auto opt = make_opt(*gpt);
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [n, p] : gpt->named_parameters()) {
    params.push_back(p);
    names.push_back(jit::proxy_name_for(n));
  }
  jit::JitOptions o;
  o.autocast = DType::bf16;
  jit::JitFunction f([gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
                     {"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); }, o);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) { return f({x, y}).at(0); };
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x, data[i].y).item<double>());
  check_traces(jit::last_traces(f));
  return finish(losses, *gpt, &jit::last_traces(f).back(), &jit::last_backward_traces(f).back());
}

Run run_step(const std::vector<Batch>& data, const std::string& without) {
  WithoutPass off(without);
  clear_autocast_cache();
  auto gpt = make_gpt();
  auto opt = make_opt(*gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) { return gpt->forward(x, y).loss; };
  jit::StepOptions o{.state = {*gpt, *opt}};
  o.autocast = DType::bf16;
  jit::CompiledStep step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) { return train_step(loss_of, *gpt, *opt, x, y); }, o);
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(step(data[i].x, data[i].y).item<double>());
  check_traces(step.last_traces());
  return finish(losses, *gpt, &step.last_traces().back());
}

Run run_lazy(const std::vector<Batch>& data, const std::string& without) {
  WithoutPass off(without);
  lazy::mark_step();
  lazy::clear_cache();
  clear_autocast_cache();
  auto gpt = make_gpt();
  gpt->to(kLazy);
  auto opt = make_opt(*gpt);
  LossFn loss_of = [&](const Tensor& x, const Tensor& y) {
    AutocastGuard amp(kBF16);
    return gpt->forward(x, y).loss;
  };
  std::vector<Tensor> losses;
  for (int i = 0; i < kSteps; ++i) {
    losses.push_back(train_step(loss_of, *gpt, *opt, data[i].x.to(kLazy), data[i].y.to(kLazy)));
    lazy::mark_step();
  }
  const jit::Trace last = lazy::last_compiled_traces().back();
  std::vector<double> values;
  for (const Tensor& l : losses) values.push_back(l.to(kCPU).item<double>());
  Run r = finish(values, *gpt, &last);
  lazy::clear_cache();
  return r;
}

void check_same_bits(const Run& got, const Run& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) CHECK(got.losses[i] == want.losses[i]);
  REQUIRE(got.params.size() == want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(got.params[i], want.params[i]));
  }
}

// Against eager bf16, which computes attention by its decomposition (the
// compiled forms: flash, f32 inside its tiles) and sums in other orders: the
// loss (about 4.2) within 2e-3; each parameter within 6e-3 after three AdamW
// steps of lr 1e-3: AdamW moves an element by about lr a step whatever its
// gradient's size, so where a gradient is near zero the two runs' signs may
// differ and the element move 2 lr apart a step (measured: 4.1e-3).
void check_near_eager(const Run& got, const Run& eager) {
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got.losses[i] - eager.losses[i]) < 2e-3);
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(got.params[i], eager.params[i]) < 6e-3);
  }
}

}  // namespace

TEST_CASE("residual layernorm bf16: a GPT trained under the jit, compile_step and the lazy device, against the program without each rewrite and eager") {
  const auto data = make_batches();
  const Run eager = run_eager(data);
  using RunFn = Run (*)(const std::vector<Batch>&, const std::string&);
  const std::pair<std::string, RunFn> modes[] = {{"module jit", run_jit}, {"compile_step", run_step}, {"lazy", run_lazy}};
  for (const auto& [mode, run] : modes) {
    CAPTURE(mode);
    const Run fused = run(data, "");
    // Per block: the attention's c_proj heads ln_2's region, the MLP's c_proj
    // the next block's ln_1 (the last block's: ln_f).  Each of the 8 biases'
    // gradients (c_attn, c_proj, c_fc, c_proj per block) is summed from bf16.
    CHECK(fused.fused_rows == 4);
    CHECK(fused.column_sums == 8);
    check_near_eager(fused, eager);
    const Run no_rows = run(data, "GEMM epilogues");
    CHECK(no_rows.fused_rows == 0);
    CHECK(no_rows.column_sums == 8);
    check_same_bits(fused, no_rows);
    const Run no_sums = run(data, "bf16 column sums");
    CHECK(no_sums.fused_rows == 4);
    CHECK(no_sums.column_sums == 0);
    check_same_bits(fused, no_sums);
  }
  clear_autocast_cache();
}
