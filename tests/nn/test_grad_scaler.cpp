// volt::amp::GradScaler (nn/amp.h): dynamic loss scaling for f16, against
// the unscaled run (exact: the scale is a power of two) and PyTorch's
// documented rules (skip and halve on Inf/NaN, double after N clean steps).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "tests/error_of.h"

#include <volt/jit/autocast.h>
#include <volt/jit/jit.h>
#include <volt/nn/amp.h>
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

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(11);
  return std::make_shared<nn::MLP>(16, std::vector<int64_t>{24, 5}, true, 0.0);
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  std::vector<uint32_t> r(v.size());
  std::memcpy(r.data(), v.data(), v.size() * sizeof(float));
  return r;
}

}  // namespace

TEST_CASE("GradScaler: bad settings and misuse are errors naming it") {
  CHECK(error_of([] { amp::GradScaler s({.init_scale = 0}); }).find("init_scale must be a finite number > 0, got 0") !=
        std::string::npos);
  CHECK(error_of([] { amp::GradScaler s({.init_scale = -2}); }).find("GradScaler") != std::string::npos);
  CHECK(error_of([] { amp::GradScaler s({.growth_factor = 1}); }).find("growth_factor") != std::string::npos);
  CHECK(error_of([] { amp::GradScaler s({.backoff_factor = 1.5}); }).find("backoff_factor") != std::string::npos);
  CHECK(error_of([] { amp::GradScaler s({.growth_interval = 0}); }).find("growth_interval") != std::string::npos);
  amp::GradScaler s;
  CHECK(error_of([&] { s.update(); }).find("expected a call of step(optimizer)") != std::string::npos);
  CHECK(error_of([&] { s.scale(Tensor::from_vector<int64_t>({1})); }).find("floating-point loss") != std::string::npos);
  auto net = make_net();
  nn::SGD opt(net->parameters(), {.lr = 0.1});
  s.unscale(opt);
  CHECK(error_of([&] { s.unscale(opt); }).find("unscale was already called") != std::string::npos);
}

TEST_CASE("GradScaler: unscaled gradients and the step equal the unscaled run's, bit for bit") {
  manual_seed(2);
  const Tensor x = Tensor::randn({8, 16}), y = Tensor::randint(0, 5, {8});
  auto plain = make_net(), scaled = make_net();
  nn::SGD plain_opt(plain->parameters(), {.lr = 0.1}), scaled_opt(scaled->parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  for (int step = 0; step < 3; ++step) {
    Tensor l0 = nn::functional::cross_entropy((*plain)(x), y);
    plain_opt.zero_grad();
    l0.backward();
    Tensor l1 = nn::functional::cross_entropy((*scaled)(x), y);
    scaled_opt.zero_grad();
    Tensor big = scaler.scale(l1);
    CHECK(big.item_double() == l1.item_double() * 65536.0);
    big.backward();
    scaler.unscale(scaled_opt);
    CHECK_FALSE(scaler.found_inf());
    const auto p0 = plain->parameters(), p1 = scaled->parameters();
    for (size_t i = 0; i < p0.size(); ++i) CHECK(bits(p1[i].grad()) == bits(p0[i].grad()));
    plain_opt.step();
    CHECK(scaler.step(scaled_opt));
    scaler.update();
    for (size_t i = 0; i < p0.size(); ++i) CHECK(bits(p1[i]) == bits(p0[i]));
  }
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 3);
}

TEST_CASE("GradScaler: an Inf or NaN gradient skips the step (parameters bit-unchanged) and halves the scale") {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    CAPTURE(bad);
    auto net = make_net();
    nn::Adam opt(net->parameters(), {.lr = 0.1});
    amp::GradScaler scaler({.growth_interval = 3});
    auto params = net->parameters();
    auto plant = [&](bool overflow) {
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor g = full(params[i].sizes(), 0.5, params[i].dtype());
        if (overflow && i == 1) g.reshape({-1}).select(0, 2).fill_(bad);  // one element of one gradient
        params[i].set_grad(g);
      }
    };
    // Two clean steps, then the overflow: the count of clean steps starts again.
    for (int i = 0; i < 2; ++i) {
      plant(false);
      CHECK(scaler.step(opt));
      scaler.update();
    }
    CHECK(scaler.growth_tracker() == 2);
    std::vector<std::vector<uint32_t>> before;
    for (const Tensor& p : params) before.push_back(bits(p));
    plant(true);
    CHECK_FALSE(scaler.step(opt));
    CHECK(scaler.found_inf());
    for (size_t i = 0; i < params.size(); ++i) CHECK(bits(params[i]) == before[i]);
    scaler.update();
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.growth_tracker() == 0);
    // growth_interval (3) clean steps in a row double it; two do not.
    for (int i = 0; i < 3; ++i) {
      plant(false);
      CHECK(scaler.step(opt));
      scaler.update();
      CHECK(scaler.get_scale() == (i < 2 ? 32768.0 : 65536.0));
    }
    CHECK(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("GradScaler: the default grows the scale after 2000 clean steps") {
  auto net = make_net();
  nn::SGD opt(net->parameters(), {.lr = 0.0});
  amp::GradScaler scaler;
  for (int i = 0; i < 2000; ++i) {
    CHECK(scaler.get_scale() == 65536.0);
    scaler.step(opt);  // no gradients at all: nothing overflows
    scaler.update();
  }
  CHECK(scaler.get_scale() == 131072.0);
}

TEST_CASE("GradScaler with f16 autocast: 50 MLP steps eagerly and with the module jit end within 2 % of f32") {
  manual_seed(99);
  const Tensor x = Tensor::randn({32, 16}), y = Tensor::randint(0, 5, {32});
  auto run = [&](std::optional<DType> low, bool jitted, amp::GradScaler* scaler) {
    auto net = make_net();
    nn::Adam opt(net->parameters(), {.lr = 1e-2});
    jit::JitFunction f = jit::jit(net);
    if (low && jitted) f = jit::autocast(f, *low);
    double last = 0;
    for (int i = 0; i < 50; ++i) {
      AutocastGuard amp(low);
      Tensor loss = nn::functional::cross_entropy(jitted ? f(x) : (*net)(x), y);
      opt.zero_grad();
      if (scaler) {
        scaler->scale(loss).backward();
        scaler->step(opt);
        scaler->update();
      } else {
        loss.backward();
        opt.step();
      }
      last = loss.item_double();
    }
    for (const Tensor& p : net->parameters()) {
      CHECK(p.dtype() == DType::f32);
      CHECK(p.grad().dtype() == DType::f32);
    }
    return last;
  };
  const double f32 = run(std::nullopt, false, nullptr);
  amp::GradScaler eager_scaler, jit_scaler;
  const double eager = run(kF16, false, &eager_scaler);
  const double jitted = run(kF16, true, &jit_scaler);
  CHECK(std::fabs(eager - f32) < 0.02 * f32);
  CHECK(std::fabs(jitted - f32) < 0.02 * f32);
  // Fewer than 2000 steps: the scale never grew; an overflow of f16 would have halved it.
  CHECK(eager_scaler.get_scale() <= 65536.0);
}
