// AdamW (nn/adamw.h) against PyTorch's documented rule, worked out by hand in
// double: decoupled decay p -= lr wd p, then Adam with bias correction.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <vector>

#include <volt/nn/adamw.h>
#include <volt/nn/optim.h>

using namespace volt;

namespace {

template <class T>
Tensor make(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector<T>(std::vector<T>(v.begin(), v.end()), shape);
}

// PyTorch's AdamW for one element: p, m, v after the given gradients, step k
// using lrs[k].
std::array<double, 3> hand_adamw(double p, const std::vector<double>& grads, const std::vector<double>& lrs,
                                 double b1, double b2, double eps, double wd) {
  double m = 0, v = 0;
  for (size_t k = 0; k < grads.size(); ++k) {
    const double t = double(k + 1), lr = lrs[k], g = grads[k];
    p = p - lr * wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    p = p - lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
  }
  return {p, m, v};
}

const std::vector<double> kW0{0.5, -1.0, 2.0, 0.0};  // a (2, 2) weight
const std::vector<std::vector<double>> kWG{{0.1, -0.2, 0.3, 1e-3}, {-0.4, 0.05, 0.3, 2.0}, {0.25, -0.5, -0.1, 0.0}};
const std::vector<double> kB0{0.3, -0.7};  // a (2) bias
const std::vector<std::vector<double>> kBG{{0.2, -0.1}, {0.0, 0.3}, {-0.6, 0.05}};
const std::vector<double> kLrs{0.1, 0.05, 0.02};  // a schedule: set_lr before each step

// Three steps of nanoGPT's groups (the weight decayed, the bias not) with the
// learning rate changed between steps.
template <class T>
void three_scheduled_steps(Tensor& w, Tensor& b, nn::AdamW& opt) {
  for (size_t k = 0; k < 3; ++k) {
    opt.set_lr(kLrs[k]);
    opt.zero_grad();
    w.set_grad(make<T>(kWG[k], {2, 2}));
    b.set_grad(make<T>(kBG[k], {2}));
    opt.step();
  }
}

}  // namespace

TEST_CASE("AdamW: three steps with groups and a schedule equal the worked-out rule (f64)") {
  Tensor w = make<double>(kW0, {2, 2}).requires_grad_(), b = make<double>(kB0, {2}).requires_grad_();
  nn::AdamW opt(nn::weight_decay_groups({w, b}, 0.1), {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  REQUIRE(opt.num_groups() == 2);
  CHECK(opt.group_weight_decay(0) == 0.1);
  CHECK(opt.group_weight_decay(1) == 0.0);
  three_scheduled_steps<double>(w, b, opt);
  CHECK(opt.step_count(0) == 3);
  CHECK(opt.lr() == 0.02);
  // Worked out from the documented rule (lr 0.1, 0.05, 0.02; betas 0.9, 0.95; wd 0.1 on w only).
  const std::vector<double> w_want{0.4206182620582213, -0.84576935372387, 1.8047133600199294, -0.14750562899963884};
  const std::vector<double> wm_want{-0.0029, -0.06169999999999999, 0.04129999999999999, 0.18008099999999996};
  const std::vector<double> wv_want{0.011176250000000009, 0.014423750000000013, 0.008836250000000007,
                                    0.19000004512500016};
  const std::vector<double> b_want{0.17474213522280954, -0.6340285774208124};
  auto wv = w.to_vector<double>(), wm = opt.exp_avg(0).to_vector<double>(), wvv = opt.exp_avg_sq(0).to_vector<double>();
  for (size_t i = 0; i < 4; ++i) {
    CHECK(wv[i] == doctest::Approx(w_want[i]).epsilon(1e-13).scale(0));
    CHECK(wm[i] == doctest::Approx(wm_want[i]).epsilon(1e-13).scale(0));
    CHECK(wvv[i] == doctest::Approx(wv_want[i]).epsilon(1e-13).scale(0));
  }
  auto bv = b.to_vector<double>();
  for (size_t i = 0; i < 2; ++i) CHECK(bv[i] == doctest::Approx(b_want[i]).epsilon(1e-13).scale(0));
}

TEST_CASE("AdamW: f32 follows the same rule; each group keeps its own lr and weight decay") {
  Tensor w = make<float>(kW0, {2, 2}).requires_grad_(), b = make<float>(kB0, {2}).requires_grad_();
  std::vector<nn::ParamGroup> groups{{.params = {w}, .lr = std::nullopt, .weight_decay = 0.3},
                                     {.params = {b}, .lr = 0.2, .weight_decay = 0.05}};
  nn::AdamW opt(groups, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3});
  CHECK(opt.group_lr(0) == 0.01);
  CHECK(opt.group_lr(1) == 0.2);
  for (size_t k = 0; k < 3; ++k) {
    opt.zero_grad();
    w.set_grad(make<float>(kWG[k], {2, 2}));
    b.set_grad(make<float>(kBG[k], {2}));
    opt.step();
  }
  auto wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) {
    auto [p, m, v] = hand_adamw(kW0[i], {kWG[0][i], kWG[1][i], kWG[2][i]}, {0.01, 0.01, 0.01}, 0.8, 0.99, 1e-3, 0.3);
    CHECK(wv[i] == doctest::Approx(p).epsilon(1e-6).scale(0));
    // m and v: f32 sums of a few terms, relative error a few float epsilons.
    CHECK(opt.exp_avg(0).to_vector<double>()[i] == doctest::Approx(m).epsilon(1e-5).scale(0));
    CHECK(opt.exp_avg_sq(0).to_vector<double>()[i] == doctest::Approx(v).epsilon(1e-5).scale(0));
  }
  for (size_t i = 0; i < 2; ++i) {
    auto [p, m, v] = hand_adamw(kB0[i], {kBG[0][i], kBG[1][i], kBG[2][i]}, {0.2, 0.2, 0.2}, 0.8, 0.99, 1e-3, 0.05);
    CHECK(bv[i] == doctest::Approx(p).epsilon(1e-6).scale(0));
  }
}

TEST_CASE("AdamW: the tensor-op path (a non-contiguous parameter) equals the one-pass loop") {
  auto run = [](bool strided) {
    Tensor w = make<double>(kW0, {2, 2});
    if (strided) w = w.t().contiguous().t();  // same values, strides (1, 2)
    w.requires_grad_();
    Tensor b = make<double>(kB0, {2}).requires_grad_();
    nn::AdamW opt(nn::weight_decay_groups({w, b}, 0.1), {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.95});
    three_scheduled_steps<double>(w, b, opt);
    return w.to_vector<double>();
  };
  auto fast = run(false), ops = run(true);
  for (size_t i = 0; i < fast.size(); ++i) CHECK(ops[i] == doctest::Approx(fast[i]).epsilon(1e-14).scale(0));
}

TEST_CASE("AdamW: decay is decoupled (not Adam's L2 term) and zero decay is Adam") {
  Tensor p1 = make<double>(kW0, {4}).requires_grad_(), p2 = make<double>(kW0, {4}).requires_grad_(),
         p3 = make<double>(kW0, {4}).requires_grad_();
  nn::AdamW adamw({p1}, {.lr = 0.1, .weight_decay = 0.0});
  nn::Adam adam({p2}, {.lr = 0.1});
  nn::AdamW decayed({p3}, {.lr = 0.1, .weight_decay = 0.5});
  for (size_t k = 0; k < 3; ++k)
    for (auto [p, o] : {std::pair<Tensor, nn::Optimizer*>{p1, &adamw}, {p2, &adam}, {p3, &decayed}}) {
      o->zero_grad();
      p.set_grad(make<double>(kWG[k], {4}));
      o->step();
    }
  CHECK(p1.to_vector<double>() == p2.to_vector<double>());
  // With g = 0 the moments stay 0 and only the decay moves p: 0 stays 0 and the
  // decay multiplies; with Adam's L2 term the decay would go through the moments.
  Tensor z = make<double>({1.0}, {1}).requires_grad_();
  nn::AdamW only_decay({z}, {.lr = 0.1, .weight_decay = 0.5});
  for (int k = 0; k < 2; ++k) {
    z.set_grad(make<double>({0.0}, {1}));
    only_decay.step();
  }
  CHECK(z.to_vector<double>()[0] == doctest::Approx(0.95 * 0.95).epsilon(1e-15));
}

TEST_CASE("AdamW: bad use is a clear error") {
  Tensor w = Tensor::zeros({2, 2}).requires_grad_();
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] { nn::AdamW({nn::ParamGroup{.params = {w}, .lr = {}, .weight_decay = {}}, nn::ParamGroup{.params = {w}, .lr = {}, .weight_decay = {}}}); });
  CHECK(m.find("AdamW") != std::string::npos);
  CHECK(m.find("already in an earlier group") != std::string::npos);
  m = message([&] { nn::AdamW({w}, {.beta2 = 1.0}); });
  CHECK(m.find("beta2 must be in [0, 1)") != std::string::npos);
  m = message([&] { nn::AdamW({nn::ParamGroup{.params = {w}, .lr = -1.0, .weight_decay = {}}}); });
  CHECK(m.find("lr must be >= 0") != std::string::npos);
  nn::AdamW opt({w});
  m = message([&] { opt.set_group_lr(3, 0.1); });
  CHECK(m.find("group 3 is out of range") != std::string::npos);
}

TEST_CASE("AdamW: a checkpoint's state resumes the run exactly") {
  Tensor w = make<double>(kW0, {2, 2}).requires_grad_(), b = make<double>(kB0, {2}).requires_grad_();
  nn::AdamW opt(nn::weight_decay_groups({w, b}, 0.1), {.lr = 0.1});
  w.set_grad(make<double>(kWG[0], {2, 2}));
  b.set_grad(make<double>(kBG[0], {2}));
  opt.step();
  nn::NamedTensors state = opt.state_dict();
  Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  nn::AdamW resumed(nn::weight_decay_groups({w2, b2}, 0.1), {.lr = 0.7});
  resumed.load_state_dict(state);
  CHECK(resumed.lr() == 0.1);
  CHECK(resumed.step_count(0) == 1);
  for (auto [p, q, o] : {std::tuple<Tensor, Tensor, nn::AdamW*>{w, b, &opt}, {w2, b2, &resumed}}) {
    p.set_grad(make<double>(kWG[1], {2, 2}));
    q.set_grad(make<double>(kBG[1], {2}));
    o->step();
  }
  CHECK(w2.to_vector<double>() == w.to_vector<double>());
  CHECK(b2.to_vector<double>() == b.to_vector<double>());
}
