// SGD and Adam against their update rules written out as plain double loops.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>

#include <volt/nn/linear.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/optim.h>
#include <volt/nn/optim_options.h>

using namespace volt;

namespace {

const std::vector<double> kP0{0.5, -1.0, 2.0, 0.0};
const std::vector<double> kG1{0.1, -0.2, 0.3, 1e-3};
const std::vector<double> kG2{-0.4, 0.05, 0.3, 2.0};

template <class T>
Tensor make(const std::vector<double>& v) {
  return Tensor::from_vector<T>(std::vector<T>(v.begin(), v.end()));
}

// Torch's Adam for one element over the given gradients; returns p, m, v.
std::array<double, 3> hand_adam(double p, const std::vector<double>& grads,
                                const nn::AdamOptions& o) {
  double m = 0, v = 0;
  for (size_t k = 0; k < grads.size(); ++k) {
    const double t = double(k + 1);
    double g = grads[k] + o.weight_decay * p;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    const double mhat = m / (1 - std::pow(o.beta1, t));
    const double vhat = v / (1 - std::pow(o.beta2, t));
    p -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
  }
  return {p, m, v};
}

template <class T>
void check_adam(const nn::AdamOptions& o, double tol) {
  Tensor p = make<T>(kP0);
  p.requires_grad_(true);
  nn::Adam opt({p}, o);
  for (const auto* g : {&kG1, &kG2}) {
    opt.zero_grad();
    p.set_grad(make<T>(*g));
    opt.step();
  }
  CHECK(opt.step_count(0) == 2);
  auto pv = p.to_vector<double>();
  auto mv = opt.exp_avg(0).to_vector<double>();
  auto vv = opt.exp_avg_sq(0).to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i) {
    auto [pw, mw, vw] = hand_adam(kP0[i], {kG1[i], kG2[i]}, o);
    // Relative tolerances (scale 0): v is ~1e-5, an absolute one would hide errors.
    CHECK(pv[i] == doctest::Approx(pw).epsilon(tol).scale(0));
    CHECK(mv[i] == doctest::Approx(mw).epsilon(tol).scale(0));
    CHECK(vv[i] == doctest::Approx(vw).epsilon(tol).scale(0));
  }
}

}  // namespace

TEST_CASE("Adam: two steps match the hand-written rule (f32 and f64)") {
  check_adam<float>({.lr = 0.1}, 1e-6);
  check_adam<double>({.lr = 0.1}, 1e-12);
  check_adam<float>({.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.1},
                    1e-6);
  check_adam<double>({.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.1},
                     1e-12);
}

TEST_CASE("Adam and SGD on a non-contiguous parameter (the tensor-op path) agree") {
  // A transposed view cannot take the one-pass loop; the rule runs as tensor ops,
  // the same path a device without a fused kernel takes.
  const nn::AdamOptions o{.lr = 0.1, .weight_decay = 0.1};
  Tensor p = make<float>(kP0).reshape({2, 2}).t().contiguous().t();  // values kP0, strides (1, 2)
  REQUIRE(!p.is_contiguous());
  p.requires_grad_(true);  // in-place updates of a leaf that needs grad: allowed in a step
  nn::Adam opt({p}, o);
  for (const auto* g : {&kG1, &kG2}) {
    p.set_grad(make<float>(*g).reshape({2, 2}));
    opt.step();
  }
  auto pv = p.contiguous().to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i)
    CHECK(pv[i] == doctest::Approx(hand_adam(kP0[i], {kG1[i], kG2[i]}, o)[0]).epsilon(1e-6));

  Tensor q = make<float>(kP0).reshape({2, 2}).t().contiguous().t();
  q.requires_grad_(true);
  nn::SGD sgd({q}, {.lr = 0.1, .momentum = 0.9});
  for (const auto* g : {&kG1, &kG2}) {
    q.set_grad(make<float>(*g).reshape({2, 2}));
    sgd.step();
  }
  auto qv = q.contiguous().to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i) {
    const double buf = 0.9 * kG1[i] + kG2[i];
    CHECK(qv[i] == doctest::Approx(kP0[i] - 0.1 * kG1[i] - 0.1 * buf).epsilon(1e-6));
  }
}

TEST_CASE("Adam: the first step moves each element by about lr") {
  // With bias correction, mhat / sqrt(vhat) = sign(g) on step 1.
  Tensor p = make<float>(kP0);
  nn::Adam opt({p}, {.lr = 1e-3});
  p.set_grad(make<float>(kG1));
  opt.step();
  auto pv = p.to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i)
    CHECK(pv[i] == doctest::Approx(kP0[i] - 1e-3 * (kG1[i] > 0 ? 1 : -1)).epsilon(1e-5));
}

TEST_CASE("SGD with momentum and weight decay: two steps by hand") {
  const nn::SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  for (bool f64 : {false, true}) {
    Tensor p = f64 ? make<double>(kP0) : make<float>(kP0);
    nn::SGD opt({p}, o);
    for (const auto* g : {&kG1, &kG2}) {
      p.set_grad(f64 ? make<double>(*g) : make<float>(*g));
      opt.step();
    }
    auto pv = p.to_vector<double>();
    for (size_t i = 0; i < kP0.size(); ++i) {
      double w = kP0[i], buf = 0;
      for (int k = 0; k < 2; ++k) {
        double g = (k == 0 ? kG1[i] : kG2[i]) + o.weight_decay * w;
        buf = k == 0 ? g : o.momentum * buf + g;
        w -= o.lr * buf;
      }
      CHECK(pv[i] == doctest::Approx(w).epsilon(f64 ? 1e-12 : 1e-6));
    }
  }
}

TEST_CASE("SGD with dampening or Nesterov momentum: three steps by PyTorch's rule, by hand") {
  // buf = g on the first step, else momentum buf + (1 - dampening) g; the
  // step along g + momentum buf (Nesterov) or buf.
  const std::vector<nn::SGDOptions> cases{{.lr = 0.1, .momentum = 0.9, .dampening = 0.3},
                                          {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
                                          {.lr = 0.05, .momentum = 0.5, .weight_decay = 0.1, .dampening = 0.5}};
  for (const nn::SGDOptions& o : cases)
    for (bool f64 : {false, true}) {
      CAPTURE(o.dampening);
      CAPTURE(o.nesterov);
      CAPTURE(f64);
      Tensor p = f64 ? make<double>(kP0) : make<float>(kP0);
      nn::SGD opt({p}, o);
      for (const auto* g : {&kG1, &kG2, &kG1}) {
        p.set_grad(f64 ? make<double>(*g) : make<float>(*g));
        opt.step();
      }
      auto pv = p.to_vector<double>();
      for (size_t i = 0; i < kP0.size(); ++i) {
        double w = kP0[i], buf = 0;
        for (int k = 0; k < 3; ++k) {
          const double g = (k == 1 ? kG2[i] : kG1[i]) + o.weight_decay * w;
          buf = k == 0 ? g : o.momentum * buf + (1 - o.dampening) * g;
          w -= o.lr * (o.nesterov ? g + o.momentum * buf : buf);
        }
        CHECK(pv[i] == doctest::Approx(w).epsilon(f64 ? 1e-12 : 1e-6));
      }
    }
  // LibTorch's spelling, and the rule's preconditions.
  Tensor p = make<float>(kP0);
  const nn::SGDOptions built = optim::SGDOptions(0.1).momentum(0.9).dampening(0).nesterov(true);
  CHECK(built.nesterov);
  CHECK(built.momentum == 0.9);
  CHECK_THROWS_WITH_AS(nn::SGD({p}, {.lr = 0.1, .nesterov = true}), doctest::Contains("Nesterov momentum needs"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(nn::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                       doctest::Contains("zero dampening"), volt::Error);
}

TEST_CASE("plain SGD is p -= lr * g") {
  Tensor p = make<float>(kP0);
  nn::SGD opt({p}, {.lr = 0.5});
  p.set_grad(make<float>(kG1));
  opt.step();
  auto pv = p.to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i)
    CHECK(pv[i] == doctest::Approx(kP0[i] - 0.5 * kG1[i]).epsilon(1e-6));
}

TEST_CASE("parameters without a grad are skipped; zero_grad clears grads") {
  Tensor a = make<float>(kP0), b = make<float>(kP0);
  nn::Adam opt({a, b});
  a.set_grad(make<float>(kG1));
  opt.step();
  CHECK(opt.step_count(0) == 1);
  CHECK(opt.step_count(1) == 0);
  CHECK(b.to_vector<double>() == kP0);
  CHECK(a.to_vector<double>() != kP0);
  opt.zero_grad();
  CHECK(!a.grad().defined());
}

TEST_CASE("an optimizer updates the module's own parameters") {
  nn::Linear fc(3, 2);
  nn::SGD opt(fc.parameters(), {.lr = 1.0});
  auto before = fc.weight().to_vector<float>();
  for (auto p : fc.parameters()) p.set_grad(Tensor::ones(p.sizes()));
  opt.step();
  auto after = fc.weight().to_vector<float>();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == doctest::Approx(before[i] - 1.0));
}

TEST_CASE("optimizer options are checked") {
  Tensor p = make<float>(kP0);
  CHECK_THROWS_WITH_AS(nn::Adam({p}, {.beta1 = 1.0}), doctest::Contains("beta1"), volt::Error);
  CHECK_THROWS_WITH_AS(nn::SGD({p}, {.lr = -1.0}), doctest::Contains("lr must be >= 0"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(nn::SGD({Tensor()}, {.lr = 1.0}), doctest::Contains("undefined"),
                       volt::Error);
  // Infinite, NaN and negative rates, decays and factors, where PyTorch takes some of them silently.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(nn::Adam({p}, {.weight_decay = -1.0}), doctest::Contains("Adam: weight_decay must be >= 0"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(nn::Adadelta({p}, {.lr = inf}), doctest::Contains("Adadelta: lr must be >= 0 and finite, got inf"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(nn::SGD({p}, {.lr = 0.1, .weight_decay = -0.5}), doctest::Contains("SGD: weight_decay"), volt::Error);
  nn::SGD sgd({p}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(sgd.set_lr(nan), doctest::Contains("SGD: lr must be >= 0 and finite"), volt::Error);
  CHECK(sgd.lr() == 0.1);
  CHECK_THROWS_WITH_AS(nn::ExponentialLR(sgd, inf), doctest::Contains("ExponentialLR: gamma"), volt::Error);
  CHECK_THROWS_WITH_AS(nn::StepLR(sgd, 2, -0.5), doctest::Contains("StepLR: gamma must be > 0"), volt::Error);
  CHECK_THROWS_WITH_AS(nn::CosineAnnealingLR(sgd, 10, -1.0), doctest::Contains("CosineAnnealingLR: eta_min"),
                       volt::Error);
  CHECK_NOTHROW(nn::ExponentialLR(sgd, 0.9));
  CHECK_NOTHROW(nn::CosineAnnealingLR(sgd, 10, 0.0));
}
