// Adadelta against its rule written as a plain f64 loop, the learning rate on
// every optimizer, and the schedulers' learning-rate sequences.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <volt/nn/lr_scheduler.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

const std::vector<double> kP0{0.5, -1.0, 2.0, 0.0, 3e-3};
// Five steps of gradients, one row per step.
const std::vector<std::vector<double>> kGrads{{0.1, -0.2, 0.3, 1e-3, 4.0},
                                              {-0.4, 0.05, 0.3, 2.0, -1.0},
                                              {0.2, 0.2, -0.1, 0.0, 0.5},
                                              {1.5, -0.01, 0.03, -2.0, 0.0},
                                              {-0.3, 0.7, 0.3, 0.1, 2.5}};

// PyTorch's Adadelta for one element, in f64; returns p, square_avg, acc_delta.
std::array<double, 3> hand_adadelta(double p, const std::vector<double>& grads, const nn::AdadeltaOptions& o) {
  double s = 0, d = 0;
  for (double g0 : grads) {
    const double g = g0 + o.weight_decay * p;
    s = o.rho * s + (1 - o.rho) * g * g;
    const double delta = std::sqrt(d + o.eps) / std::sqrt(s + o.eps) * g;
    d = o.rho * d + (1 - o.rho) * delta * delta;
    p -= o.lr * delta;
  }
  return {p, s, d};
}

template <class T>
void check_adadelta(const nn::AdadeltaOptions& o, double tol, bool strided) {
  Tensor p = Tensor::from_vector<T>(std::vector<T>(kP0.begin(), kP0.end()));
  if (strided) {  // a non-contiguous parameter takes the tensor-op path (the lazy device's)
    Tensor base = Tensor::zeros({static_cast<int64_t>(kP0.size()), 2}, p.dtype());
    base.select(1, 0).copy_(p);
    p = base.select(1, 0);
    REQUIRE(!p.is_contiguous());
  }
  p.requires_grad_(true);
  nn::Adadelta opt({p}, o);
  for (const auto& g : kGrads) {
    opt.zero_grad();
    p.set_grad(Tensor::from_vector<T>(std::vector<T>(g.begin(), g.end())));
    opt.step();
  }
  auto pv = p.to_vector<double>(), sv = opt.square_avg(0).to_vector<double>(), dv = opt.acc_delta(0).to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i) {
    std::vector<double> gi;
    for (const auto& g : kGrads) gi.push_back(g[i]);
    auto [pw, sw, dw] = hand_adadelta(kP0[i], gi, o);
    INFO("element " << i);
    CHECK(pv[i] == doctest::Approx(pw).epsilon(tol));
    CHECK(sv[i] == doctest::Approx(sw).epsilon(tol).scale(0));
    CHECK(dv[i] == doctest::Approx(dw).epsilon(tol).scale(0));
  }
}

}  // namespace

TEST_CASE("Adadelta: five steps match PyTorch's rule computed in f64 (f32, f64, tensor-op path)") {
  for (bool strided : {false, true}) {
    INFO("strided " << strided);
    check_adadelta<double>({}, 1e-12, strided);
    check_adadelta<float>({}, 1e-5, strided);
    check_adadelta<double>({.lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 0.1}, 1e-12, strided);
    check_adadelta<float>({.lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 0.1}, 1e-5, strided);
  }
  Tensor p = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(nn::Adadelta({p}, {.rho = 1.5}), doctest::Contains("Adadelta: rho must be in [0, 1]"), Error);
}

TEST_CASE("every optimizer's learning rate can be read and set") {
  Tensor p = Tensor::zeros({2});
  nn::SGD sgd({p}, {.lr = 0.1});
  nn::Adam adam({p});
  nn::Adadelta adadelta({p});
  CHECK(sgd.lr() == 0.1);
  CHECK(adam.lr() == 1e-3);
  CHECK(adadelta.lr() == 1.0);
  for (nn::Optimizer* o : std::vector<nn::Optimizer*>{&sgd, &adam, &adadelta}) {
    o->set_lr(0.25);
    CHECK(o->lr() == 0.25);
    CHECK_THROWS_AS(o->set_lr(-1), Error);
  }
  // The new rate is the one a step uses: SGD moves p by lr * g.
  p.requires_grad_(true);
  p.set_grad(Tensor::ones({2}));
  sgd.step();
  CHECK(p.to_vector<float>() == std::vector<float>{-0.25f, -0.25f});
}

TEST_CASE("StepLR, ExponentialLR and CosineAnnealingLR give PyTorch's learning-rate sequences") {
  Tensor p = Tensor::zeros({1});
  nn::Adadelta opt({p}, {.lr = 1.0});
  nn::StepLR step(opt, 1, 0.7);
  // PyTorch multiplies the current rate by gamma at each multiple of step_size.
  double want = 1.0;
  for (int e = 1; e <= 14; ++e) {
    CHECK(opt.lr() == want);
    step.step();
    want *= 0.7;
    CHECK(step.last_epoch() == e);
  }
  CHECK(step.get_last_lr() == doctest::Approx(std::pow(0.7, 14)).epsilon(1e-12));

  nn::SGD sgd({p}, {.lr = 0.1});
  nn::StepLR every3(sgd, 3, 0.5);
  std::vector<double> seen;
  for (int e = 0; e < 7; ++e) {
    seen.push_back(sgd.lr());
    every3.step();
  }
  CHECK(seen == std::vector<double>{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025});

  nn::SGD sgd2({p}, {.lr = 0.1});
  nn::ExponentialLR expo(sgd2, 0.9);
  expo.step();
  expo.step();
  CHECK(sgd2.lr() == 0.1 * 0.9 * 0.9);

  nn::SGD sgd3({p}, {.lr = 0.1});
  nn::CosineAnnealingLR cos(sgd3, 4, 0.01);
  std::vector<double> lrs;
  for (int e = 0; e < 5; ++e) {
    lrs.push_back(sgd3.lr());
    cos.step();
  }
  const double pi = std::acos(-1.0);
  for (int e = 0; e < 5; ++e)
    CHECK(lrs[e] == doctest::Approx(0.01 + 0.09 * (1 + std::cos(pi * e / 4)) / 2).epsilon(1e-12));
  CHECK(lrs[4] == doctest::Approx(0.01));
  // Past T_max, against PyTorch's own recursive step() (its documented
  // recurrence, written out here): from eta_min the rate climbs back, a
  // cosine of period 2 T_max.
  nn::SGD sgd4({p}, {.lr = 0.1});
  nn::CosineAnnealingLR cos4(sgd4, 4, 0.01);
  double torch_lr = 0.1;
  for (int64_t t = 1; t <= 20; ++t) {  // t: last_epoch after the step
    cos4.step();
    const double T = 4, eta_min = 0.01, base = 0.1;
    if ((t - 1 - 4) % 8 == 0)
      torch_lr = torch_lr + (base - eta_min) * (1 - std::cos(pi / T)) / 2;
    else
      torch_lr = (1 + std::cos(pi * double(t) / T)) / (1 + std::cos(pi * double(t - 1) / T)) * (torch_lr - eta_min) + eta_min;
    INFO("epoch " << t);
    CHECK(sgd4.lr() == doctest::Approx(torch_lr).epsilon(1e-9));
  }
  CHECK(sgd4.lr() == doctest::Approx(0.01 + 0.09 * (1 + std::cos(pi * 20 / 4)) / 2).epsilon(1e-9));  // back at 0.1 at 2 T_max multiples
  CHECK_THROWS_WITH_AS(nn::StepLR(sgd, 0), doctest::Contains("StepLR: step_size must be positive"), Error);
}
