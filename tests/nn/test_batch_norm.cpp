// BatchNorm1d/2d, Dropout2d and RMSprop against PyTorch's documented formulas,
// computed in f64 loops.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include <volt/nn/batch_norm.h>
#include <volt/nn/rmsprop.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "error_of.h"

using namespace volt;

namespace {
// Per channel c of x (N, C, S) flattened: mean and biased variance over N and S.
void channel_stats(const std::vector<double>& x, int64_t n, int64_t c, int64_t s, std::vector<double>& mean,
                   std::vector<double>& var) {
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) mean[j] += x[(i * c + j) * s + k];
  for (auto& m : mean) m /= static_cast<double>(n * s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) var[j] += std::pow(x[(i * c + j) * s + k] - mean[j], 2);
  for (auto& v : var) v /= static_cast<double>(n * s);
}
}  // namespace

TEST_CASE("BatchNorm2d: batch statistics in training, running ones (momentum 0.1, unbiased) in eval") {
  const int64_t n = 3, c = 2, h = 2, w = 3, s = h * w;
  manual_seed(4);
  Tensor x = randn({n, c, h, w}, DType::f64) * 2.0 + 1.0;
  const auto xv = x.to_vector<double>();
  nn::BatchNorm2d bn(c);
  bn.to(kCPU);
  // weight and bias as PyTorch initialises them; set to other values to see them act.
  bn.weight().detach().copy_(Tensor::from_vector<float>({1.5f, -0.5f}));
  bn.bias().detach().copy_(Tensor::from_vector<float>({0.25f, 2.0f}));
  std::vector<double> mean, var;
  channel_stats(xv, n, c, s, mean, var);
  const auto y = bn(x).to_vector<double>();
  const double gamma[2] = {1.5, -0.5}, beta[2] = {0.25, 2.0};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) {
        const size_t at = static_cast<size_t>((i * c + j) * s + k);
        CHECK(y[at] == doctest::Approx((xv[at] - mean[j]) / std::sqrt(var[j] + 1e-5) * gamma[j] + beta[j]).epsilon(1e-6));
      }
  const double unbias = static_cast<double>(n * s) / static_cast<double>(n * s - 1);
  const auto rm = bn.running_mean().to_vector<float>();
  const auto rv = bn.running_var().to_vector<float>();
  for (int64_t j = 0; j < c; ++j) {
    CHECK(rm[j] == doctest::Approx(0.1 * mean[j]).epsilon(1e-5));
    CHECK(rv[j] == doctest::Approx(0.9 + 0.1 * var[j] * unbias).epsilon(1e-5));
  }
  CHECK(bn.named_buffers().size() == 3);
  bn.eval();
  const auto ye = bn(x).to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) {
        const size_t at = static_cast<size_t>((i * c + j) * s + k);
        CHECK(ye[at] == doctest::Approx((xv[at] - rm[j]) / std::sqrt(rv[j] + 1e-5) * gamma[j] + beta[j]).epsilon(1e-5));
      }
  std::ostringstream os;
  os << bn;
  CHECK(os.str() == "BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
}

TEST_CASE("BatchNorm1d normalises (N, C) per feature, backpropagates, and checks its input") {
  manual_seed(5);
  nn::BatchNorm1d bn(3);
  Tensor x = randn({6, 3}, DType::f64).requires_grad_();
  Tensor y = bn(x);
  // Each feature of the output has mean 0 and biased variance ~1 (var/(var+eps)).
  const auto m = y.mean(0).to_vector<double>();
  for (double v : m) CHECK(std::fabs(v) < 1e-6);
  (y * y).sum().backward();
  CHECK(x.grad().defined());
  CHECK(testing::error_of([&] { bn(randn({6, 4})); }).find("with C = 3") != std::string::npos);
  CHECK(testing::error_of([&] { bn(randn({1, 3})); }).find("more than 1 value per channel") != std::string::npos);
  CHECK(testing::error_of([] { nn::BatchNorm1d(3, {.momentum = 2.0}); }).find("momentum") != std::string::npos);
}

TEST_CASE("Dropout2d zeroes whole channels, scales the rest by 1/(1-p), and is the identity in eval") {
  manual_seed(6);
  const int64_t n = 40, c = 50, hw = 9;
  Tensor x = Tensor::rand({n, c, 3, 3}) + 1.0;
  nn::Dropout2d drop(0.3);
  const auto xv = x.to_vector<float>();
  const auto yv = drop(x).to_vector<float>();
  int64_t dropped = 0, mixed = 0, wrong = 0;
  for (int64_t plane = 0; plane < n * c; ++plane) {
    int64_t zeros = 0;
    for (int64_t k = 0; k < hw; ++k) {
      const size_t at = static_cast<size_t>(plane * hw + k);
      if (yv[at] == 0.0f) ++zeros;
      else if (yv[at] != xv[at] * static_cast<float>(1.0 / 0.7)) ++wrong;
    }
    if (zeros == hw) ++dropped;
    else if (zeros != 0) ++mixed;
  }
  CHECK(mixed == 0);
  CHECK(wrong == 0);
  // 2000 channels: the dropped fraction's standard deviation is about 0.01.
  CHECK(static_cast<double>(dropped) / (n * c) == doctest::Approx(0.3).epsilon(0.15));
  drop.eval();
  CHECK(drop(x).equal(x));
  CHECK(testing::error_of([&] { drop.train(); drop(randn({4, 4})); }).find("(N, C, H, W)") != std::string::npos);
}

TEST_CASE("RMSprop follows PyTorch's rule (plain, with momentum, centred, with weight decay)") {
  for (int variant = 0; variant < 3; ++variant) {
    nn::RMSpropOptions o;
    o.lr = 0.01;
    o.alpha = 0.9;
    o.eps = 1e-8;
    if (variant == 1) o.momentum = 0.8, o.weight_decay = 0.1;
    if (variant == 2) o.centered = true;
    const std::vector<double> p0{0.5, -1.0, 2.0};
    Tensor p = Tensor::from_vector<double>(p0).requires_grad_();
    nn::RMSprop opt({p}, o);
    std::vector<double> ref = p0, s(3, 0.0), a(3, 0.0), b(3, 0.0);
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      (p * p * p).sum().backward();  // g = 3 p^2
      opt.step();
      for (size_t i = 0; i < 3; ++i) {
        double g = 3 * ref[i] * ref[i] + o.weight_decay * ref[i];
        s[i] = o.alpha * s[i] + (1 - o.alpha) * g * g;
        double avg;
        if (o.centered) {
          a[i] = o.alpha * a[i] + (1 - o.alpha) * g;
          avg = std::sqrt(s[i] - a[i] * a[i]) + o.eps;
        } else {
          avg = std::sqrt(s[i]) + o.eps;
        }
        if (o.momentum > 0) {
          b[i] = o.momentum * b[i] + g / avg;
          ref[i] -= o.lr * b[i];
        } else {
          ref[i] -= o.lr * g / avg;
        }
      }
    }
    const auto got = p.to_vector<double>();
    for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-12));
    const auto state = opt.state_dict();
    CHECK(state.size() == 1 + 1 + (o.momentum > 0) + (o.centered ? 1 : 0));
  }
  CHECK(testing::error_of([] { nn::RMSprop({Tensor::ones({1}).requires_grad_()}, {.alpha = 1.5}); }).find("alpha") != std::string::npos);
}
