// The warm-up + cosine schedule (nn/lr_schedule.h) at chosen steps, against
// nanoGPT's get_lr worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <volt/nn/adamw.h>
#include <volt/nn/lr_schedule.h>

using namespace volt;

TEST_CASE("WarmupCosineLR: warm-up from 0, cosine to min_lr, min_lr after") {
  nn::WarmupCosineLR s({.max_lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .decay_steps = 2000});
  CHECK(s(0) == 0.0);
  CHECK(s(1) == doctest::Approx(1e-5).epsilon(1e-15));
  CHECK(s(50) == doctest::Approx(5e-4).epsilon(1e-15));
  CHECK(s(99) == doctest::Approx(9.9e-4).epsilon(1e-15));
  CHECK(s(100) == doctest::Approx(1e-3).epsilon(1e-15));  // the peak: cos(0)
  // Half-way through the decay (step 1050): cos(pi / 2) = 0, the mean of the two.
  CHECK(s(1050) == doctest::Approx(5.5e-4).epsilon(1e-13));
  // A quarter of the way (step 575): 1e-4 + 0.5 (1 + cos(pi / 4)) 9e-4.
  CHECK(s(575) == doctest::Approx(1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4).epsilon(1e-13));
  CHECK(s(2000) == doctest::Approx(1e-4).epsilon(1e-13));
  CHECK(s(2001) == 1e-4);
  CHECK(s(100000) == 1e-4);
  // Monotone: up during warm-up, down after.
  for (int64_t t = 1; t < 100; ++t) CHECK(s(t) > s(t - 1));
  for (int64_t t = 101; t <= 2000; ++t) CHECK(s(t) <= s(t - 1));
}

TEST_CASE("WarmupCosineLR: drives an optimizer's learning rate, and bad settings are errors") {
  nn::WarmupCosineLR s({.max_lr = 0.1, .min_lr = 0.0, .warmup = 0, .decay_steps = 10});
  CHECK(s(0) == 0.1);
  CHECK(s(10) == doctest::Approx(0.0).scale(1e-18));
  Tensor w = Tensor::zeros({2, 2}).requires_grad_();
  nn::AdamW opt(nn::weight_decay_groups({w}, 0.1));
  opt.set_lr(s(5));
  CHECK(opt.group_lr(0) == doctest::Approx(0.05).epsilon(1e-15));
  CHECK(opt.group_lr(1) == doctest::Approx(0.05).epsilon(1e-15));
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { nn::WarmupCosineLR({.warmup = 10, .decay_steps = 5}); }).find("decay_steps must be >= warmup") !=
        std::string::npos);
  CHECK(message([] { nn::WarmupCosineLR({.max_lr = 1e-4, .min_lr = 1e-3}); }).find("min_lr <= max_lr") !=
        std::string::npos);
  CHECK(message([&] { s(-1); }).find("WarmupCosineLR") != std::string::npos);
}
