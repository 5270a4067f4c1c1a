// Mixed precision: the autocast rule (tensor/autocast.h) eagerly under an
// AutocastGuard, as the jit's trace transform (jit/autocast.h) and in a
// compiled step, against the f32 program and f64 loops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>

#include "tests/error_of.h"
#include "tests/jit/step/eager_step.h"
#include "tests/tensor/reference.h"

#include <volt/jit/autocast.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using volt::testing::error_of;

namespace {

// x, w1, b1, w2, b2, y -> the loss, through every list of the rule.
std::vector<Tensor> small_net(const std::vector<Tensor>& a) {
  Tensor h = relu(linear(a[0], a[1], a[2]));
  h = layer_norm(h, {h.sizes().back()});
  Tensor logits = linear(h, a[3], a[4]);
  Tensor loss = cross_entropy(logits, a[5]);
  return {add(loss, mean(softmax(logits, 1)))};
}

std::vector<Tensor> small_inputs() {
  manual_seed(5);
  std::vector<Tensor> in = {Tensor::randn({4, 6}), Tensor::randn({8, 6}), Tensor::randn({8}),
                            Tensor::randn({3, 8}), Tensor::randn({3}), Tensor::randint(0, 3, {4})};
  for (size_t i = 1; i < 5; ++i) in[i].requires_grad_(true);
  return in;
}

const jit::Trace& autocast_trace(const jit::JitFunction& f) {
  for (const jit::Trace& t : jit::last_traces(f))
    if (t.provenance.rfind("Autocast transform", 0) == 0) return t;
  FAIL("no autocast transform among the traces");
  return jit::last_traces(f).front();
}

std::string masked(const std::string& trace) {
  std::string s = std::regex_replace(trace, std::regex("\\bt[0-9]+\\b"), "t#");
  return std::regex_replace(s, std::regex("took [0-9]+ milliseconds"), "took # milliseconds");
}

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(7);
  return std::make_shared<nn::MLP>(64, std::vector<int64_t>{96, 96, 10}, true, 0.1);
}

struct Batch {
  Tensor x, y;
};
std::vector<Batch> make_batches() {
  manual_seed(99);
  std::vector<Batch> r;
  for (int i = 0; i < 5; ++i) r.push_back({Tensor::randn({32, 64}), Tensor::randint(0, 10, {32})});
  return r;
}

// The mean loss of steps 40..49 of 50 Adam steps (the same data and draws),
// the step given as a function of the batch.
template <class Step>
double mean_late_loss(Step step) {
  const std::vector<Batch> data = make_batches();
  manual_seed(1234);
  double sum = 0;
  for (int i = 0; i < 50; ++i) {
    const Batch& b = data[static_cast<size_t>(i) % data.size()];
    const double l = step(b.x, b.y).item_double();
    REQUIRE(std::isfinite(l));
    if (i >= 40) sum += l;
  }
  return sum / 10;
}

double relative_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("autocast: the rule's lists, and bad types named") {
  CHECK(autocast_rule(OpId::linear) == AutocastRule::LowPrecision);
  CHECK(autocast_rule(OpId::conv2d) == AutocastRule::LowPrecision);
  CHECK(autocast_rule(OpId::scaled_dot_product_attention) == AutocastRule::LowPrecision);
  CHECK(autocast_rule(OpId::cross_entropy) == AutocastRule::Float32);
  CHECK(autocast_rule(OpId::sum) == AutocastRule::Float32);
  CHECK(autocast_rule(OpId::add) == AutocastRule::None);
  CHECK(error_of([] { AutocastGuard g(DType::f32); }).find("AutocastGuard") != std::string::npos);
  CHECK(error_of([] { AutocastGuard g(DType::i64); }).find("(bf16 or f16), got i64") != std::string::npos);
  CHECK(error_of([] { jit::autocast(jit::jit(small_net), DType::f32); }).find("autocast") != std::string::npos);
  CHECK(error_of([] {
          Tensor w = Tensor::randn({2, 2});
          jit::compile_step([](const Tensor& x) { return sum(x); }, {.state = {std::vector<Tensor>{w}},
                                                                     .autocast = DType::f64});
        }).find("compile_step") != std::string::npos);
}

TEST_CASE("autocast eager: linear runs on bf16-rounded operands, its result bf16; f64 loop reference") {
  manual_seed(3);
  const Tensor x = Tensor::randn({5, 7}), w = Tensor::randn({4, 7}), b = Tensor::randn({4});
  Tensor y;
  {
    AutocastGuard amp(kBF16);
    y = linear(x, w, b);
  }
  REQUIRE(y.dtype() == kBF16);
  // The operands rounded to bf16, multiplied and summed exactly in f64.
  const std::vector<double> xr = convert_element_type(x, kBF16).to_vector<double>();
  const std::vector<double> wr = convert_element_type(w, kBF16).to_vector<double>();
  const std::vector<double> br = convert_element_type(b, kBF16).to_vector<double>();
  const std::vector<double> got = y.to_vector<double>();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = br[j];
      for (int k = 0; k < 7; ++k) s += xr[i * 7 + k] * wr[j * 7 + k];
      CHECK(std::fabs(got[i * 4 + j] - s) <= std::fabs(s) * (1.0 / 128) + 1e-6);  // one bf16 rounding
    }
  // The f32 list: a bf16 operand is computed on in f32 and the result is f32.
  {
    AutocastGuard amp(kBF16);
    const Tensor s = softmax(y, 1), l = sum(y);
    CHECK(s.dtype() == DType::f32);
    CHECK(l.dtype() == DType::f32);
    CHECK(add(y, b).dtype() == DType::f32);  // other ops promote as usual
  }
  CHECK(linear(x, w, b).dtype() == DType::f32);  // off again
}

TEST_CASE("autocast: gradients of f32 leaves are f32 and within 2 % (bf16) / 0.5 % (f16) of the f32 ones") {
  std::vector<Tensor> in = small_inputs();
  auto grads = [&](std::optional<DType> low, bool jitted) {
    for (size_t i = 1; i < 5; ++i) in[i].set_grad(Tensor());
    if (jitted) {
      jit::JitFunction f = jit::jit(small_net);
      if (low) f = jit::autocast(f, *low);
      f(in)[0].backward();
    } else {
      AutocastGuard amp(low);
      Tensor loss = small_net(in)[0];
      CHECK(loss.dtype() == DType::f32);
      loss.backward();
    }
    std::vector<Tensor> g;
    for (size_t i = 1; i < 5; ++i) g.push_back(in[i].grad());
    return g;
  };
  const std::vector<Tensor> want = grads(std::nullopt, false);
  for (DType low : {kBF16, kF16})
    for (bool jitted : {false, true}) {
      CAPTURE(dtype_name(low));
      CAPTURE(jitted);
      const std::vector<Tensor> got = grads(low, jitted);
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(got[i].defined());
        CHECK(got[i].dtype() == DType::f32);
        CHECK(relative_diff(got[i], want[i]) < (low == kBF16 ? 0.02 : 0.005));
        CHECK(relative_diff(got[i], want[i]) > 0);  // it did compute in the low type
      }
    }
}

TEST_CASE("autocast jit: the transform's trace, each op in the type of its list (golden)") {
  std::vector<Tensor> in = small_inputs();
  auto f = jit::autocast(jit::jit(small_net), kBF16);
  const Tensor loss = f(in)[0];
  CHECK(loss.dtype() == DType::f32);
  const jit::Trace& t = autocast_trace(f);
  int casts_to_low = 0;
  for (const jit::BoundSymbol& b : t.bsyms) {
    const AutocastRule rule = autocast_rule(b.call.op);
    for (const Value& v : b.call.args)
      if (v.is_tensor && v.tensor.defined() && is_floating(v.tensor.dtype())) {
        CAPTURE(op_name(b.call.op));
        if (rule == AutocastRule::LowPrecision) CHECK(v.tensor.dtype() == kBF16);
        if (rule == AutocastRule::Float32) CHECK(v.tensor.dtype() == DType::f32);
      }
    if (b.call.op == OpId::convert_element_type && b.call.attrs.dtype == kBF16) ++casts_to_low;
  }
  // x, the LayerNorm's f32 output, the two weights and the two biases: each once.
  CHECK(casts_to_low == 6);
  const std::string got = masked(t.str());
  const std::string name = "autocast_bf16.txt";
  if (const char* dir = std::getenv("VOLT_UPDATE_GOLDEN")) {
    std::ofstream(std::string(dir) + "/" + name) << got;
    return;
  }
  std::ifstream file(std::string(VOLT_TEST_DATA_DIR) + "/" + name);
  REQUIRE_MESSAGE(file.good(), "missing golden file " << name);
  const std::string want(std::istreambuf_iterator<char>(file), {});
  CHECK_MESSAGE(got == want, name << " changed; it is now:\n" << got);
}

TEST_CASE("autocast: 50 MLP training steps in bf16 end within 2 % of f32's loss: eager, module jit, compile_step") {
  auto eager = [](std::optional<DType> low) {
    auto net = make_net();
    nn::Adam opt(net->parameters(), {.lr = 1e-3});
    return mean_late_loss([&](const Tensor& x, const Tensor& y) {
      AutocastGuard amp(low);
      return volt::testing::eager_step(*net, opt, x, y);
    });
  };
  const double f32 = eager(std::nullopt);
  const double amp_eager = eager(kBF16);
  CHECK(std::fabs(amp_eager - f32) < 0.02 * f32);

  auto net = make_net();
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto fwd = jit::autocast(jit::jit(net), kBF16);
  const double amp_jit = mean_late_loss([&](const Tensor& x, const Tensor& y) {
    Tensor logits = fwd(x);
    CHECK(logits.dtype() == kBF16);
    Tensor loss = nn::functional::cross_entropy(convert_element_type(logits, DType::f32), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  });
  CHECK(std::fabs(amp_jit - f32) < 0.02 * f32);
  // The eager guard and the jit's transform make the same casts: near equal.
  CHECK(std::fabs(amp_jit - amp_eager) < 0.005 * f32);
  for (const Tensor& p : net->parameters()) CHECK(p.dtype() == DType::f32);  // master weights

  auto snet = make_net();
  nn::Adam sopt(snet->parameters(), {.lr = 1e-3});
  jit::CompiledStep step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) { return volt::testing::eager_step(*snet, sopt, x, y); },
      {.state = {*snet, sopt}, .autocast = kBF16});
  const double amp_step = mean_late_loss([&](const Tensor& x, const Tensor& y) { return step(x, y); });
  CHECK(std::fabs(amp_step - f32) < 0.02 * f32);
  CHECK(std::fabs(amp_step - amp_eager) < 0.005 * f32);
  CHECK(step.compiles() == 1);
  bool casts = false;
  for (const jit::Trace& t : step.last_traces())
    if (t.str().find("convert_element_type") != std::string::npos && t.str().find("bf16") != std::string::npos)
      casts = true;
  CHECK(casts);
  for (const Tensor& p : snet->parameters()) CHECK(p.dtype() == DType::f32);
}

TEST_CASE("autocast: a jitted function called under an AutocastGuard takes its type, and keys its cache by it") {
  std::vector<Tensor> in = small_inputs();
  for (Tensor& t : in) t = t.detach();
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{linear(a[0], a[1], a[2])}; });
  CHECK(f(in)[0].dtype() == DType::f32);
  {
    AutocastGuard amp(kF16);
    CHECK(f(in)[0].dtype() == kF16);
  }
  CHECK(f.last_miss_reason().find("autocast=f16") != std::string::npos);
  CHECK(f(in)[0].dtype() == DType::f32);  // the f32 entry again, a hit
  CHECK(jit::cache_misses(f) == 2);
}

TEST_CASE("autocast on the lazy device: the guard's casts are recorded; 50 steps end within 2 % of f32") {
  auto eager_net = make_net();
  nn::Adam eager_opt(eager_net->parameters(), {.lr = 1e-3});
  const double f32 = mean_late_loss([&](const Tensor& x, const Tensor& y) {
    return volt::testing::eager_step(*eager_net, eager_opt, x, y);
  });
  auto net = make_net();
  net->to(kLazy);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  Tensor logits_seen;
  const double amp_lazy = mean_late_loss([&](const Tensor& x, const Tensor& y) {
    AutocastGuard amp(kBF16);
    logits_seen = (*net)(x.to(kLazy));
    Tensor loss = nn::functional::cross_entropy(logits_seen, y.to(kLazy));
    opt.zero_grad();
    loss.backward();
    opt.step();
    lazy::mark_step();
    return loss.to(kCPU);
  });
  CHECK(logits_seen.dtype() == kBF16);
  CHECK(std::fabs(amp_lazy - f32) < 0.02 * f32);
  for (const Tensor& p : net->parameters()) CHECK(p.dtype() == DType::f32);
}

TEST_CASE("autocast composes with the grad transforms: grad(autocast(f)) gives f32 gradients near f32's") {
  std::vector<Tensor> in = small_inputs();
  for (Tensor& t : in) t = t.detach();
  auto f = jit::jit(small_net);
  const std::vector<Tensor> want = jit::grad(f)(in);
  const std::vector<Tensor> got = jit::grad(jit::autocast(f, kBF16))(in);
  REQUIRE(got.size() == want.size());
  REQUIRE(got.size() == 5);  // x, w1, b1, w2, b2 (y is an integer input)
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].dtype() == DType::f32);
    CHECK(relative_diff(got[i], want[i]) < 0.02);
    CHECK(relative_diff(got[i], want[i]) > 0);
  }
  // A fresh autocast of the same function gives the same bits: the transform is deterministic.
  const std::vector<Tensor> again = jit::grad(jit::autocast(f, kBF16))(in);
  for (size_t i = 0; i < got.size(); ++i) CHECK(again[i].to_vector<float>() == got[i].to_vector<float>());
}
