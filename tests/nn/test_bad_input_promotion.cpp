// Bad or unusual input that used to pass silently, against PyTorch's rules:
// clamp's result dtype follows type promotion (a fractional bound of an
// integer tensor is not truncated); clip_grad_norm_'s error_if_nonfinite; a
// parameter of integer dtype is refused, naming the op.  Each in every mode
// where it exists (eager, the jit, a compiled step, the lazy device).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include "tests/error_of.h"
#include "tests/tensor/modes.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::error_of;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("clamp follows PyTorch's type promotion: a fractional bound of an integer tensor is not truncated") {
  const Tensor x = Tensor::from_vector<int64_t>({-3, 0, 1, 2, 5});
  // torch.clamp(torch.tensor([-3, 0, 1, 2, 5]), 0.5, 2.5) -> tensor([0.5, 0.5, 1.0, 2.0, 2.5]) (float32)
  const Tensor y = clamp(x, 0.5, 2.5);
  CHECK(y.dtype() == DType::f32);
  CHECK(y.to_vector<float>() == std::vector<float>{0.5f, 0.5f, 1.0f, 2.0f, 2.5f});
  CHECK(x.clamp(std::nullopt, 1.5).to_vector<float>() == std::vector<float>{-3, 0, 1, 1.5f, 1.5f});
  // An integer bound keeps the integer dtype; a floating tensor keeps its own.
  CHECK(clamp(x, 0, 2).dtype() == DType::i64);
  CHECK(clamp(x.to(DType::i32), 0, 2).dtype() == DType::i32);
  CHECK(clamp(Tensor::ones({2}, DType::f64), 0.5).dtype() == DType::f64);
  CHECK(clamp(Tensor::ones({2}, DType::bf16), 0.5).dtype() == DType::bf16);
  // A bool tensor: an int bound gives i64, a float bound f32 (torch.result_type's rule).
  const Tensor b = Tensor::from_vector<bool>({true, false});
  CHECK(clamp(b, 0, 3).dtype() == DType::i64);
  CHECK(clamp(b, 0.25).to_vector<float>() == std::vector<float>{1.0f, 0.25f});
  // An infinite bound of an integer tensor: f32 infinities, as PyTorch.
  CHECK(std::isinf(clamp(x, INFINITY).to_vector<float>()[2]));
  // The same in the jit, a compiled step and on the lazy device (beside a floating input, for a gradient).
  check_modes([](const std::vector<Tensor>& a) { return add(clamp(a[1], 0.5, 2.5), a[0]); },
              {Tensor::randn({5}), x});
}

namespace {

// One parameter whose gradient is `grad`.
Tensor with_grad(const std::vector<float>& grad) {
  Tensor p = Tensor::zeros({static_cast<int64_t>(grad.size())}).requires_grad_();
  p.set_grad(Tensor::from_vector<float>(grad));
  return p;
}

}  // namespace

TEST_CASE("clip_grad_norm_ error_if_nonfinite: an Inf or NaN total norm is an error; without it, PyTorch's scaling") {
  for (float bad : {INFINITY, NAN}) {
    INFO("bad " << bad);
    Tensor p = with_grad({1.0f, bad}), q = with_grad({2.0f});
    const std::string message = error_of([&] { nn::utils::clip_grad_norm_({p, q}, 1.0, 2.0, true); });
    CHECK(has(message, "clip_grad_norm_:"));
    CHECK(has(message, std::isnan(bad) ? "is NaN" : "is Inf"));
    CHECK(has(message, "error_if_nonfinite"));
    // Raised before any gradient is scaled.
    CHECK(q.grad().to_vector<float>() == std::vector<float>{2.0f});
    // Without: coef = min(1, max_norm / (total + 1e-6)) is 0 for Inf (Inf * 0 is NaN), NaN for NaN.
    Tensor total = nn::utils::clip_grad_norm_({p, q}, 1.0, 2.0, false);
    CHECK(std::isnan(total.item<float>()) == std::isnan(bad));
    const std::vector<float> gp = p.grad().to_vector<float>(), gq = q.grad().to_vector<float>();
    CHECK(std::isnan(gp[1]));
    if (std::isnan(bad)) {
      CHECK(std::isnan(gp[0]));
      CHECK(std::isnan(gq[0]));
    } else {
      CHECK(gp[0] == 0.0f);
      CHECK(gq[0] == 0.0f);
    }
  }
  // A finite norm with error_if_nonfinite: as without it.
  Tensor p = with_grad({3.0f, 4.0f});
  CHECK(nn::utils::clip_grad_norm_({p}, 1.0, 2.0, true).item<float>() == doctest::Approx(5.0f));
  CHECK(p.grad().to_vector<float>()[0] == doctest::Approx(0.6f).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm_ error_if_nonfinite in a compiled step and on the lazy device") {
  // loss = sum(w * x): w's gradient is x, infinite when x holds an Inf.
  const Tensor good = Tensor::from_vector<float>({3.0f, 4.0f}), bad = Tensor::from_vector<float>({INFINITY, 1.0f});
  Tensor w = Tensor::zeros({2}).requires_grad_();
  nn::SGD opt({w}, {.lr = 1.0});
  auto body = [&](const std::vector<Tensor>& in) {
    Tensor loss = sum(mul(w, in[0]));
    opt.zero_grad();
    loss.backward();
    nn::utils::clip_grad_norm_({w}, 1.0, 2.0, true);
    opt.step();
    return std::vector<Tensor>{loss};
  };
  auto step = jit::compile_step(body, {.state = {std::vector<Tensor>{w}, opt}});
  step({good});
  CHECK(w.to_vector<float>()[0] == doctest::Approx(-0.6f).epsilon(1e-5));
  const std::string message = error_of([&] { step({bad}); });
  CHECK(has(message, "clip_grad_norm_:"));
  CHECK(has(message, "is Inf"));
  CHECK(w.to_vector<float>()[0] == doctest::Approx(-0.6f).epsilon(1e-5));  // not stepped by NaN
  // Lazy: the check runs when the graph does.
  Tensor lw = Tensor::zeros({2}, DType::f32, kLazy).requires_grad_();
  sum(mul(lw, bad.to(kLazy))).backward();
  const std::string lazy_message = error_of([&] {
    nn::utils::clip_grad_norm_({lw}, 1.0, 2.0, true);
    lw.grad().to(kCPU);
    lazy::mark_step();
  });
  CHECK(has(lazy_message, "clip_grad_norm_:"));
  lazy::mark_step();
}

namespace {

struct IntParam : nn::Module {
  IntParam() : nn::Module("IntParam") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace

TEST_CASE("a parameter of integer dtype is refused, naming the op, as PyTorch refuses requires_grad on it") {
  IntParam m;
  const std::string message =
      error_of([&] { m.register_parameter("count", Tensor::zeros({3}, DType::i64)); });
  CHECK(has(message, "register_parameter:"));
  CHECK(has(message, "'count'"));
  CHECK(has(message, "i64"));
  CHECK(m.parameters().empty());
  CHECK(has(error_of([] { Tensor::zeros({3}, DType::i32).requires_grad_(); }), "requires_grad_: only floating"));
  // Without a gradient wanted it is a tensor the module holds, as PyTorch's
  // nn.Parameter(t, requires_grad=False); AdamW, as PyTorch's, leaves it alone.
  IntParam frozen;
  Tensor t = frozen.register_parameter("count", Tensor::from_vector<int64_t>({1, 2, 3}), false);
  CHECK(!t.requires_grad());
  nn::AdamW opt(frozen.parameters(), {.lr = 0.1});
  opt.step();
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
}
