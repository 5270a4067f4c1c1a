// mse_loss, smooth_l1_loss, binary_cross_entropy_with_logits and index_select:
// values against plain f64 loops of PyTorch's documented rules, f64 gradients
// by finite differences, every mode against eager, errors naming the op
// (the nn layers: tests/nn/test_regression_losses.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/indexing.h>
#include <volt/tensor/losses.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/modes.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::sample;

namespace {

std::vector<double> f64(const Tensor& t) { return t.contiguous().to_vector<double>(); }

// The elementwise losses, reduced as `r`, from plain loops.
double reduced(const std::vector<double>& l, Reduction r) {
  double s = 0;
  for (double v : l) s += v;
  return r == Reduction::Mean ? s / static_cast<double>(l.size()) : s;
}

std::vector<double> mse_ref(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> l;
  for (size_t i = 0; i < x.size(); ++i) l.push_back((x[i] - y[i]) * (x[i] - y[i]));
  return l;
}

std::vector<double> smooth_l1_ref(const std::vector<double>& x, const std::vector<double>& y, double beta) {
  std::vector<double> l;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    l.push_back(d < beta ? 0.5 * d * d / beta : d - 0.5 * beta);
  }
  return l;
}

// -w [pw y log s + (1 - y) log(1 - s)], s = 1 / (1 + exp(-x)), with (N, C)
// inputs, w (N, C) and pw (C).
std::vector<double> bce_ref(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w,
                            const std::vector<double>& pw, int64_t C) {
  std::vector<double> l;
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = 1 / (1 + std::exp(-x[i])), p = pw.empty() ? 1 : pw[i % C], wi = w.empty() ? 1 : w[i];
    l.push_back(-wi * (p * y[i] * std::log(s) + (1 - y[i]) * std::log(1 - s)));
  }
  return l;
}

}  // namespace

TEST_CASE("mse_loss and smooth_l1_loss equal PyTorch's rules in every reduction") {
  Tensor x = sample({3, 5}, DType::f32, 1) * 2.0, y = sample({3, 5}, DType::f32, 2);
  const std::vector<double> xv = f64(x), yv = f64(y);
  for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
    CHECK(mse_loss(x, y, r).item<double>() == doctest::Approx(reduced(mse_ref(xv, yv), r)).epsilon(1e-5));
    for (double beta : {0.0, 0.5, 1.0, 3.0}) {
      CAPTURE(beta);
      CHECK(smooth_l1_loss(x, y, r, beta).item<double>() ==
            doctest::Approx(reduced(smooth_l1_ref(xv, yv, beta), r)).epsilon(1e-5));
    }
  }
  const std::vector<double> none = f64(smooth_l1_loss(x, y, Reduction::None, 0.5)), want = smooth_l1_ref(xv, yv, 0.5);
  REQUIRE(none.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(none[i] == doctest::Approx(want[i]).epsilon(1e-5));
  CHECK(mse_loss(x, y, Reduction::None).sizes() == Shape{3, 5});
  // The two pieces of smooth L1 meet at |d| = beta: the quadratic side gives beta / 2.
  CHECK(smooth_l1_loss(Tensor::full({1}, 0.5, DType::f64), Tensor::zeros({1}, DType::f64), kSum, 0.5).item<double>() ==
        doctest::Approx(0.25));
}

TEST_CASE("binary_cross_entropy_with_logits equals -w [pw y log s + (1 - y) log(1 - s)], even for large logits") {
  Tensor x = sample({4, 3}, DType::f64, 3) * 4.0, y = (sample({4, 3}, DType::f64, 4) > 0.0).to(DType::f64);
  Tensor w = sample({4, 3}, DType::f64, 5, /*positive=*/true), pw = Tensor::from_vector<double>({0.5, 2.0, 3.0});
  const std::vector<double> xv = f64(x), yv = f64(y);
  CHECK(binary_cross_entropy_with_logits(x, y).item<double>() ==
        doctest::Approx(reduced(bce_ref(xv, yv, {}, {}, 3), Reduction::Mean)).epsilon(1e-10));
  CHECK(binary_cross_entropy_with_logits(x, y, {.weight = w, .pos_weight = pw, .reduction = kSum}).item<double>() ==
        doctest::Approx(reduced(bce_ref(xv, yv, f64(w), f64(pw), 3), Reduction::Sum)).epsilon(1e-10));
  // Soft targets are allowed, as in PyTorch.
  Tensor soft = Tensor::full({4, 3}, 0.3, DType::f64);
  CHECK(binary_cross_entropy_with_logits(x, soft, {.pos_weight = pw}).item<double>() ==
        doctest::Approx(reduced(bce_ref(xv, f64(soft), {}, f64(pw), 3), Reduction::Mean)).epsilon(1e-10));
  // A logit of +-100 in f32: log(sigmoid) would be log(0) = -inf; the loss is finite.
  Tensor big = Tensor::from_vector<float>({100, -100}), target = Tensor::from_vector<float>({0, 1});
  const std::vector<double> l = f64(binary_cross_entropy_with_logits(big, target, {.reduction = kNone}));
  CHECK(l[0] == doctest::Approx(100));
  CHECK(l[1] == doctest::Approx(100));
}

TEST_CASE("the losses and index_select: f64 gradients by finite differences") {
  Tensor x = sample({3, 4}, DType::f64, 6) * 2.0, y = sample({3, 4}, DType::f64, 7);
  Tensor pw = Tensor::from_vector<double>({0.5, 2.0, 1.0, 3.0});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1]); }, {x, y}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& a) { return smooth_l1_loss(a[0], a[1], kSum, 0.7); }, {x, y})
            .ok);
  Tensor labels = (y > 0.0).to(DType::f64);
  CHECK(autograd::gradcheck(
            [&](const std::vector<Tensor>& a) {
              return binary_cross_entropy_with_logits(a[0], labels, {.weight = a[1].abs(), .pos_weight = pw});
            },
            {x, y})
            .ok);
  Tensor rows = Tensor::from_vector<int64_t>({2, 0, 2, 1});
  CHECK(autograd::gradcheck([&](const std::vector<Tensor>& a) { return index_select(a[0], 0, rows) * 1.5; }, {x}).ok);
  CHECK(autograd::gradcheck([&](const std::vector<Tensor>& a) { return index_select(a[0], 1, rows); }, {x}).ok);
}

TEST_CASE("the losses and index_select: the jit, compile_step and the lazy device equal eager") {
  Tensor x = sample({4, 6}, DType::f32, 8), y = sample({4, 6}, DType::f32, 9);
  Tensor labels = (y > 0.0).to(DType::f32), pw = Tensor::full({6}, 2.0);
  check_modes([](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1]); }, {x, y});
  check_modes([](const std::vector<Tensor>& a) { return smooth_l1_loss(a[0], a[1], kNone, 0.3); }, {x, y});
  check_modes(
      [](const std::vector<Tensor>& a) {
        return binary_cross_entropy_with_logits(a[0], a[1], {.weight = a[2], .pos_weight = a[3], .reduction = kNone});
      },
      {x, labels, y.abs(), pw});
  Tensor rows = Tensor::from_vector<int64_t>({3, 1, 1});
  check_modes([](const std::vector<Tensor>& a) { return index_select(a[0], 0, a[1]); }, {x, rows});
  check_modes([](const std::vector<Tensor>& a) { return index_select(a[0], -1, a[1]); }, {x, rows});
  // An integer tensor's picks, scaling a floating input so that every mode has a gradient to take.
  Tensor ints = Tensor::from_vector<int64_t>({4, -2, 9, 1});
  check_modes(
      [](const std::vector<Tensor>& a) {
        return a[0] * convert_element_type(index_select(a[1], 0, a[2]), DType::f32).reshape({3, 1});
      },
      {x.narrow(0, 0, 3), ints, rows});
}

TEST_CASE("index_select and index({rows}) pick slices as plain loops do") {
  Tensor x = Tensor::arange(24, DType::f32).reshape({2, 3, 4});
  Tensor picked = index_select(x, 1, Tensor::from_vector<int64_t>({2, 0}));
  REQUIRE(picked.sizes() == Shape{2, 2, 4});
  const std::vector<float> got = picked.contiguous().to_vector<float>();
  const int64_t want_rows[2] = {2, 0};
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 4; ++c) CHECK(got[(a * 2 + b) * 4 + c] == static_cast<float>(a * 12 + want_rows[b] * 4 + c));
  using namespace volt::indexing;
  Tensor rows = x.reshape({6, 4}).index({Tensor::from_vector<int32_t>({5, 5, 0})});
  CHECK(rows.contiguous().to_vector<float>() == std::vector<float>{20, 21, 22, 23, 20, 21, 22, 23, 0, 1, 2, 3});
  CHECK(x.index_select(2, Tensor::from_vector<int64_t>({3})).sizes() == Shape{2, 3, 1});
  CHECK(index_select(x, 0, Tensor::zeros({0}, DType::i64)).sizes() == Shape{0, 3, 4});
  // Integer and bool tensors are picked exactly (labels past 2^53 too), as LibTorch's labels.index({rows}).
  const int64_t big = (int64_t{1} << 60) + 3;
  Tensor labels = Tensor::from_vector<int64_t>({7, big, -5, 0});
  CHECK(labels.index({Tensor::from_vector<int64_t>({1, 3, 1, 2})}).to_vector<int64_t>() ==
        std::vector<int64_t>{big, 0, big, -5});
  // The ends of i64 and values around 2^53 and 2^63, each picked as a loop picks it.
  const int64_t top = std::numeric_limits<int64_t>::max(), bottom = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> edges{top,         bottom,          top - 1,       bottom + 1,    top - 600,
                                   bottom + 600, (int64_t{1} << 53) + 1, -(int64_t{1} << 53) - 1, -big,
                                   (int64_t{1} << 32) - 1, -(int64_t{1} << 32), 4294967296, -1, 1};
  std::vector<int64_t> order(edges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>((i * 5 + 3) % edges.size());
  std::vector<int64_t> expected;
  for (int64_t i : order) expected.push_back(edges[static_cast<size_t>(i)]);
  CHECK(index_select(Tensor::from_vector<int64_t>(edges), 0, Tensor::from_vector<int64_t>(order)).to_vector<int64_t>() ==
        expected);
  Tensor flags = Tensor::from_vector<bool>({true, false, false, true, true, false}, {3, 2});
  Tensor picked_flags = index_select(flags, 0, Tensor::from_vector<int32_t>({2, 0}));
  CHECK(picked_flags.dtype() == DType::b8);
  CHECK(picked_flags.to(DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1, 0});
  Tensor bytes = Tensor::from_vector<uint8_t>({250, 1, 2, 255}, {2, 2});
  CHECK(index_select(bytes, 1, Tensor::from_vector<int64_t>({1, 1, 0})).to_vector<uint8_t>() ==
        std::vector<uint8_t>{1, 1, 250, 255, 255, 2});
}

TEST_CASE("the losses and index_select: bad input names the op") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(mse_loss(x, Tensor::zeros({3})), doctest::Contains("mse_loss: expected input and target of one shape"),
                       Error);
  CHECK_THROWS_WITH_AS(smooth_l1_loss(x, x, kMean, -1), doctest::Contains("smooth_l1_loss: beta must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, Tensor::zeros({2, 3}, DType::i64)),
                       doctest::Contains("expected floating input and target"), Error);
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, x, {.pos_weight = Tensor::ones({4})}),
                       doctest::Contains("binary_cross_entropy_with_logits"), Error);
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, x, {.weight = Tensor::ones({4, 2, 3})}),
                       doctest::Contains("weight of shape [4, 2, 3] does not broadcast"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 2, Tensor::zeros({1}, DType::i64)), doctest::Contains("index_select: dim 2 out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, Tensor::zeros({1})), doctest::Contains("index_select: expected a 1-D integer index"),
                       Error);
  CHECK_THROWS_AS(index_select(Tensor::zeros({2, 3}, DType::i64), 0, Tensor::from_vector<int64_t>({-1})), Error);
  CHECK_THROWS_AS(index_select(x, 0, Tensor::from_vector<int64_t>({2})), Error);  // row 2 of 2
}
