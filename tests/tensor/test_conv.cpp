// conv2d, max_pool2d and flatten against naive f64 loops, their gradients
// against central differences, and their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

struct Geo {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// y[n, o, i, j] = b[o] + sum_{c, a, b} x[n, c, i*sh - ph + a*dh, j*sw - pw + b*dw] * w[o, c, a, b]
std::vector<double> naive_conv(const Geo& g, const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>* b) {
  std::vector<double> y(g.n * g.o * g.oh() * g.ow());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t i = 0; i < g.oh(); ++i)
        for (int64_t j = 0; j < g.ow(); ++j) {
          double s = b ? (*b)[o] : 0.0;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t a = 0; a < g.kh; ++a)
              for (int64_t bb = 0; bb < g.kw; ++bb) {
                int64_t ih = i * g.sh - g.ph + a * g.dh, iw = j * g.sw - g.pw + bb * g.dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                s += x[((n * g.c + c) * g.h + ih) * g.w + iw] * w[((o * g.c + c) * g.kh + a) * g.kw + bb];
              }
          y[((n * g.o + o) * g.oh() + i) * g.ow() + j] = s;
        }
  return y;
}

// Max over each window (padding is -inf) and, for the gradient, the index of
// the first maximum in row-major window order.
std::vector<double> naive_pool(const Geo& g, const std::vector<double>& x, std::vector<int64_t>* argmax = nullptr) {
  std::vector<double> y(g.n * g.c * g.oh() * g.ow());
  if (argmax) argmax->assign(y.size(), -1);
  for (int64_t p = 0; p < g.n * g.c; ++p)
    for (int64_t i = 0; i < g.oh(); ++i)
      for (int64_t j = 0; j < g.ow(); ++j) {
        double m = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t a = 0; a < g.kh; ++a)
          for (int64_t bb = 0; bb < g.kw; ++bb) {
            int64_t ih = i * g.sh - g.ph + a * g.dh, iw = j * g.sw - g.pw + bb * g.dw;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
            double v = x[(p * g.h + ih) * g.w + iw];
            if (at < 0 || v > m) m = v, at = (p * g.h + ih) * g.w + iw;
          }
        const int64_t k = (p * g.oh() + i) * g.ow() + j;
        y[k] = m;
        if (argmax) (*argmax)[k] = at;
      }
  return y;
}

const Geo kCases[] = {
    // n  c  h  w  o kh kw sh sw ph pw dh dw
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1},  // plain
    {1, 2, 9, 8, 3, 3, 2, 2, 3, 1, 0, 1, 1},  // strides, padding on one side, batch 1
    {2, 2, 9, 9, 2, 3, 3, 1, 2, 2, 1, 2, 3},  // dilation
    {3, 1, 5, 7, 2, 5, 1, 1, 1, 0, 2, 1, 1},  // odd kernel, 1 input channel
    {1, 4, 4, 4, 5, 1, 1, 1, 1, 0, 0, 1, 1},  // 1x1
};

std::string label(const Geo& g) {
  return "x (" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) + ", " +
         std::to_string(g.w) + "), kernel " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + ", stride " +
         std::to_string(g.sh) + "," + std::to_string(g.sw) + ", padding " + std::to_string(g.ph) + "," +
         std::to_string(g.pw) + ", dilation " + std::to_string(g.dh) + "," + std::to_string(g.dw);
}

Conv2dOptions options(const Geo& g) { return {{g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}, 1}; }

}  // namespace

TEST_CASE("conv2d equals a naive f64 loop (f64 and f32, with and without bias)") {
  uint32_t seed = 1;
  for (const Geo& g : kCases) {
    INFO(label(g));
    Tensor x = sample({g.n, g.c, g.h, g.w}, DType::f64, seed++);
    Tensor w = sample({g.o, g.c, g.kh, g.kw}, DType::f64, seed++);
    Tensor b = sample({g.o}, DType::f64, seed++);
    std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
    Tensor want = Tensor::from_vector<double>(naive_conv(g, xv, wv, &bv), {g.n, g.o, g.oh(), g.ow()});
    Tensor want_nb = Tensor::from_vector<double>(naive_conv(g, xv, wv, nullptr), {g.n, g.o, g.oh(), g.ow()});
    Tensor y = conv2d(x, w, b, options(g));
    REQUIRE(y.sizes() == want.sizes());
    CHECK(max_abs_diff(y, want) < 1e-12);
    CHECK(max_abs_diff(conv2d(x, w, Tensor(), options(g)), want_nb) < 1e-12);
    Tensor y32 = conv2d(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), options(g));
    CHECK(y32.dtype() == DType::f32);
    CHECK(max_abs_diff(y32, want) < 1e-4);
    // A non-contiguous input reads the same values.
    CHECK(max_abs_diff(conv2d(strided(x), w, b, options(g)), want) < 1e-12);
  }
}

TEST_CASE("conv2d's gradients (input, weight, bias) pass gradcheck") {
  uint32_t seed = 40;
  for (const Geo& g : kCases) {
    INFO(label(g));
    Tensor x = sample({g.n, g.c, g.h, g.w}, DType::f64, seed++);
    Tensor w = sample({g.o, g.c, g.kh, g.kw}, DType::f64, seed++);
    Tensor b = sample({g.o}, DType::f64, seed++);
    const Conv2dOptions o = options(g);
    auto r = autograd::gradcheck([o](const std::vector<Tensor>& a) { return conv2d(a[0], a[1], a[2], o); },
                                 {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("im2col and col2im are adjoint: <im2col(x), c> = <x, col2im(c)>") {
  const Window2d win{{3, 2}, {2, 1}, {1, 1}, {1, 2}};
  Tensor x = sample({2, 3, 7, 8}, DType::f64, 7);
  Tensor cols = im2col(x, win);
  Tensor c = sample(cols.sizes(), DType::f64, 8);
  const double lhs = sum(mul(cols, c)).item<double>();
  const double rhs = sum(mul(x, col2im(c, win, 7, 8))).item<double>();
  CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
}

TEST_CASE("max_pool2d equals a naive f64 loop, and its gradient goes to the first maximum") {
  const Geo pools[] = {
      {2, 3, 8, 8, 0, 2, 2, 2, 2, 0, 0, 1, 1},  // the 2x2 pool (its own fast path)
      {1, 2, 7, 9, 0, 3, 3, 2, 2, 1, 1, 1, 1},  // odd sizes, padding, batch 1
      {2, 1, 9, 8, 0, 2, 3, 1, 2, 0, 1, 2, 1},  // dilation, overlapping windows
      {1, 2, 5, 5, 0, 2, 2, 2, 2, 0, 0, 1, 1},  // the 2x2 pool with an odd input (last row dropped)
  };
  uint32_t seed = 70;
  for (const Geo& g : pools) {
    INFO(label(g));
    Tensor x = sample({g.n, g.c, g.h, g.w}, DType::f64, seed++);
    std::vector<int64_t> at;
    std::vector<double> want = naive_pool(g, x.to_vector<double>(), &at);
    Tensor y = max_pool2d(x, {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
    REQUIRE(y.sizes() == Shape{g.n, g.c, g.oh(), g.ow()});
    CHECK(max_abs_diff(y, Tensor::from_vector<double>(want, y.sizes())) == 0);
    CHECK(max_abs_diff(max_pool2d(x.to(DType::f32), {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}),
                       Tensor::from_vector<double>(want, y.sizes())) < 1e-6);
    // The gradient: each output's gradient added to its window's first maximum.
    Tensor gy = sample(y.sizes(), DType::f64, seed++);
    std::vector<double> gv = gy.to_vector<double>(), gx(x.numel(), 0.0);
    for (size_t k = 0; k < at.size(); ++k) gx[at[k]] += gv[k];
    Tensor got = max_pool2d_backward(gy, x, Window2d{{g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}});
    CHECK(max_abs_diff(got, Tensor::from_vector<double>(gx, x.sizes())) < 1e-12);
    const Geo gg = g;
    auto r = autograd::gradcheck(
        [gg](const std::vector<Tensor>& a) {
          return max_pool2d(a[0], {gg.kh, gg.kw}, {gg.sh, gg.sw}, {gg.ph, gg.pw}, {gg.dh, gg.dw});
        },
        {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("max_pool2d: stride defaults to the kernel; ties and NaN as PyTorch") {
  Tensor x = Tensor::from_vector<float>({1, 1, 0, 2, 1, 1, 3, 3, NAN, 5, 7, 7, 4, 6, 7, 7}, {1, 1, 4, 4});
  Tensor y = max_pool2d(x, {2, 2});
  CHECK(y.sizes() == Shape{1, 1, 2, 2});
  std::vector<float> v = y.to_vector<float>();
  CHECK(v[0] == 1);
  CHECK(v[1] == 3);
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 7);
  Tensor g = max_pool2d_backward(Tensor::ones({1, 1, 2, 2}), x, Window2d{{2, 2}, {2, 2}, {0, 0}, {1, 1}});
  // Ties: the first one in row-major order takes the whole gradient; a NaN wins its window.
  CHECK(g.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0});
}

TEST_CASE("flatten merges dims start_dim..end_dim") {
  Tensor x = sample({2, 3, 4, 5}, DType::f32, 3);
  CHECK(flatten(x, 1).sizes() == Shape{2, 60});
  CHECK(flatten(x).sizes() == Shape{120});
  CHECK(flatten(x, 1, 2).sizes() == Shape{2, 12, 5});
  CHECK(flatten(x, -2).sizes() == Shape{2, 3, 20});
  CHECK(max_abs_diff(flatten(x, 1), x.reshape({2, 60})) == 0);
  CHECK(flatten(x.permute({0, 2, 1, 3}), 1).to_vector<float>() == x.permute({0, 2, 1, 3}).contiguous().reshape({2, 60}).to_vector<float>());
  CHECK_THROWS_WITH_AS(flatten(x, 4), doctest::Contains("flatten: dims (4, -1) out of range"), Error);
  CHECK_THROWS_WITH_AS(flatten(x, 2, 1), doctest::Contains("flatten: start_dim 2 comes after end_dim 1"), Error);
}

TEST_CASE("conv2d and max_pool2d reject bad shapes with errors that name the op") {
  Tensor x = Tensor::zeros({2, 3, 8, 8});
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 2, 3, 3})), doctest::Contains("conv2d: input has 3 channels"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 9, 3})),
                       doctest::Contains("conv2d: the kernel (9) is larger than the padded input (8 + 2 * 0 = 8)"),
                       Error);
  CHECK_NOTHROW(conv2d(x, Tensor::zeros({4, 3, 9, 3}), Tensor(), {{1, 1}, {1, 0}, {1, 1}, 1}));
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), {{1, 1}, {0, 0}, {4, 1}, 1}),
                       doctest::Contains("conv2d: the kernel (3, dilated to 9) is larger"), Error);
  CHECK_THROWS_WITH_AS(conv2d(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3})),
                       doctest::Contains("conv2d: expected a 4-D input (N, C, H, W)"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5})),
                       doctest::Contains("conv2d: bias must be f32[4]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}, DType::f64)),
                       doctest::Contains("conv2d: input cpu f32[2, 3, 8, 8] and weight"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), {{0, 1}, {0, 0}, {1, 1}, 1}),
                       doctest::Contains("conv2d: stride must be positive"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), {{1, 1}, {0, 0}, {1, 1}, 2}),
                       doctest::Contains("conv2d: only groups=1"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {9, 2}), doctest::Contains("max_pool2d: the kernel (9) is larger"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}),
                       doctest::Contains("max_pool2d: padding should be at most half the kernel size"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(Tensor::zeros({2, 8, 8}), {2, 2}),
                       doctest::Contains("max_pool2d: expected a 4-D input"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(Tensor::zeros({1, 1, 4, 4}, DType::i64), {2, 2}),
                       doctest::Contains("max_pool2d: expected an f32 or f64 input"), Error);
}
