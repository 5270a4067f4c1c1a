// Gradient clipping (nn/clip_grad.h) against PyTorch's documented rule worked
// out by hand: total = norm of the per-parameter norms; every gradient times
// min(1, max_norm / (total + 1e-6)).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <volt/nn/clip_grad.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

// Two parameters with gradients (3, 4) (norm 5) and ((12)) (norm 12): 2-norm 13.
struct Params {
  Tensor a = Tensor::zeros({2}, DType::f64).requires_grad_();
  Tensor b = Tensor::zeros({1, 1}, DType::f64).requires_grad_();
  Params() {
    a.set_grad(Tensor::from_vector<double>({3.0, -4.0}));
    b.set_grad(Tensor::from_vector<double>({12.0}, {1, 1}));
  }
  std::vector<Tensor> list() const { return {a, b}; }
  std::vector<double> grads() const {
    auto x = a.grad().to_vector<double>(), y = b.grad().to_vector<double>();
    x.insert(x.end(), y.begin(), y.end());
    return x;
  }
};

void check_scaled(const Params& p, double scale) {
  const std::vector<double> want{3.0 * scale, -4.0 * scale, 12.0 * scale};
  auto got = p.grads();
  for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-15).scale(0));
}

}  // namespace

TEST_CASE("clip_grad_norm_: the 2-norm of all gradients, and the scale applied") {
  Params p;
  Tensor total = nn::utils::clip_grad_norm_(p.list(), 1.0);
  CHECK(total.dim() == 0);
  CHECK(total.dtype() == DType::f64);
  CHECK(total.item<double>() == doctest::Approx(13.0).epsilon(1e-15));
  check_scaled(p, 1.0 / (13.0 + 1e-6));
  // Within max_norm: the gradients are left as they are (times 1).
  Params q;
  CHECK(nn::utils::clip_grad_norm_(q.list(), 13.5).item<double>() == doctest::Approx(13.0).epsilon(1e-15));
  check_scaled(q, 1.0);
}

TEST_CASE("clip_grad_norm_: the 1-norm, the inf-norm and a 3-norm") {
  Params one;
  CHECK(nn::utils::clip_grad_norm_(one.list(), 2.0, 1.0).item<double>() == doctest::Approx(19.0).epsilon(1e-15));
  check_scaled(one, 2.0 / (19.0 + 1e-6));
  Params inf;
  CHECK(nn::utils::clip_grad_norm_(inf.list(), 2.0, nn::utils::kInfNorm).item<double>() == 12.0);
  check_scaled(inf, 2.0 / (12.0 + 1e-6));
  // Per parameter (27 + 64)^(1/3) and 12; together (91 + 1728)^(1/3).
  Params three;
  const double want = std::cbrt(1819.0);
  CHECK(nn::utils::clip_grad_norm_(three.list(), 1.0, 3.0).item<double>() == doctest::Approx(want).epsilon(1e-14));
  check_scaled(three, 1.0 / (want + 1e-6));
}

TEST_CASE("clip_grad_norm_: f32 gradients, parameters without one, and none at all") {
  Tensor a = Tensor::zeros({2}).requires_grad_(), none = Tensor::zeros({3}).requires_grad_();
  a.set_grad(Tensor::from_vector<float>({0.6f, 0.8f}));
  Tensor total = nn::utils::clip_grad_norm_({a, none}, 0.5);
  CHECK(total.dtype() == DType::f32);
  CHECK(total.item<double>() == doctest::Approx(1.0).epsilon(1e-7));
  auto g = a.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(0.3).epsilon(1e-6));
  CHECK(g[1] == doctest::Approx(0.4).epsilon(1e-6));
  CHECK(!none.grad().defined());
  CHECK(nn::utils::clip_grad_norm_({none}, 1.0).item<double>() == 0.0);
}

TEST_CASE("clip_grad_norm_: an expanded gradient (of a sum) is scaled element by element") {
  Tensor w = Tensor::ones({2, 3}).requires_grad_();
  (w.sum() * 2.0).backward();  // d/dw = 2 everywhere; 2-norm sqrt(6 * 4)
  const double norm = std::sqrt(24.0);
  CHECK(nn::utils::clip_grad_norm_({w}, 1.0).item<double>() == doctest::Approx(norm).epsilon(1e-6));
  for (double v : w.grad().to_vector<double>()) CHECK(v == doctest::Approx(2.0 / (norm + 1e-6)).epsilon(1e-6));
}

TEST_CASE("clip_grad_value_: every element clamped to [-clip, clip]") {
  Params p;
  nn::utils::clip_grad_value_(p.list(), 3.5);
  CHECK(p.grads() == std::vector<double>{3.0, -3.5, 3.5});
}

TEST_CASE("clipping: bad arguments are clear errors naming the function") {
  Params p;
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] { nn::utils::clip_grad_norm_(p.list(), 1.0, -2.0); });
  CHECK(m.find("clip_grad_norm_") != std::string::npos);
  CHECK(m.find("norm_type must be positive") != std::string::npos);
  m = message([&] { nn::utils::clip_grad_norm_(p.list(), -1.0); });
  CHECK(m.find("max_norm must be >= 0") != std::string::npos);
  m = message([&] { nn::utils::clip_grad_value_(p.list(), -1.0); });
  CHECK(m.find("clip_grad_value_") != std::string::npos);
  m = message([&] { nn::utils::clip_grad_norm_({Tensor()}, 1.0); });
  CHECK(m.find("parameter 0 is undefined") != std::string::npos);
}
