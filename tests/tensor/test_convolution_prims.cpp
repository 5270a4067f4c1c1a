// The convolution prims' CPU kernels (one product per image, bias and ReLU in
// the store) against the same sums computed in parts (im2col, matmul, col2im,
// add, relu), against a naive f64 loop at sizes that span several packed
// blocks and tiles, and across thread counts; conv2d_relu fused against
// relu(conv2d); the gradient prims' own gradients.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"
#include "tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

struct Case {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw;
  Window2d win() const { return {{kh, kw}, {sh, sw}, {ph, pw}, {dh, dw}}; }
  Conv2dOptions options() const { return {{sh, sw}, {ph, pw}, {dh, dw}, 1}; }
  std::string label() const {
    return "x (" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) + ", " +
           std::to_string(w) + "), " + std::to_string(o) + " outputs, kernel " + std::to_string(kh) + "x" +
           std::to_string(kw);
  }
};

// Sizes past one register tile (O > 12 rows, L > 32 columns), past one packed
// block of k (C kh kw > 400, O > 400 for the input gradient is not needed: k = O
// blocks the same way), more images than the weight gradient's 16 groups, and
// the tutorial's second conv.
const Case kCases[] = {
    // n   c   h   w   o kh kw sh sw ph pw dh dw
    {3, 50, 9, 10, 13, 3, 3, 1, 1, 0, 0, 1, 1},   // k = 450: two blocks
    {20, 3, 11, 9, 17, 3, 2, 2, 1, 1, 1, 1, 2},   // 20 images, strides, padding, dilation
    {2, 32, 26, 26, 64, 3, 3, 1, 1, 0, 0, 1, 1},  // the tutorial's conv2
    {5, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0, 1, 1},   // the tutorial's conv1
};

// y[n, o, i, j] = b[o] + sum x * w, in f64.
Tensor naive_conv(const Case& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xv = x.to(DType::f64).to_vector<double>(), wv = w.to(DType::f64).to_vector<double>(),
                            bv = b.to(DType::f64).to_vector<double>();
  const int64_t oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  const int64_t ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  std::vector<double> y(size_t(g.n * g.o * oh * ow));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bv[size_t(o)];
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t a = 0; a < g.kh; ++a)
              for (int64_t e = 0; e < g.kw; ++e) {
                const int64_t ih = i * g.sh - g.ph + a * g.dh, iw = j * g.sw - g.pw + e * g.dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                s += xv[size_t(((n * g.c + c) * g.h + ih) * g.w + iw)] *
                     wv[size_t(((o * g.c + c) * g.kh + a) * g.kw + e)];
              }
          y[size_t(((n * g.o + o) * oh + i) * ow + j)] = s;
        }
  return Tensor::from_vector<double>(y, {g.n, g.o, oh, ow});
}

Tensor by_parts(OpId op, std::vector<Value> args, std::vector<int64_t> ints, bool relu = false) {
  Attrs a;
  a.ints = std::move(ints);
  a.flag = relu;
  return convolution_by_parts(OpCall{op, std::move(args), std::move(a)});
}

struct Operands {
  Tensor x, w, b, gy;
};

Operands operands(const Case& g, DType dt, uint32_t seed) {
  Operands r;
  r.x = sample({g.n, g.c, g.h, g.w}, dt, seed);
  r.w = sample({g.o, g.c, g.kh, g.kw}, dt, seed + 1);
  r.b = sample({g.o}, dt, seed + 2);
  const Tensor y = convolution(r.x, r.w, r.b, g.win());
  r.gy = sample(y.sizes(), dt, seed + 3);
  return r;
}

}  // namespace

TEST_CASE("convolution prims: the CPU kernels equal the parts (im2col, matmul, col2im) and a naive f64 loop") {
  uint32_t seed = 300;
  for (const Case& g : kCases) {
    INFO(g.label());
    const Operands f = operands(g, DType::f32, seed += 4);
    const Window2d win = g.win();
    // Forward, with bias, with bias and ReLU, without bias: the same bits as the parts.
    const Tensor y = convolution(f.x, f.w, f.b, win);
    CHECK(same_bits(y, by_parts(OpId::convolution, {f.x, f.w, f.b}, win.ints())));
    CHECK(same_bits(convolution(f.x, f.w, f.b, win, true), by_parts(OpId::convolution, {f.x, f.w, f.b}, win.ints(), true)));
    CHECK(same_bits(convolution(f.x, f.w, Tensor(), win), by_parts(OpId::convolution, {f.x, f.w}, win.ints())));
    CHECK(max_abs_diff(y, naive_conv(g, f.x, f.w, f.b)) < 1e-4);
    // The input gradient: the same bits as matmul + col2im.
    std::vector<int64_t> ints = win.ints();
    ints.push_back(g.h);
    ints.push_back(g.w);
    const Tensor gx = convolution_grad_input(f.gy, f.w, win, g.h, g.w);
    CHECK(same_bits(gx, by_parts(OpId::convolution_grad_input, {f.gy, f.w}, ints)));
    // The weight gradient sums the images in another order: within rounding.
    const Tensor gw = convolution_grad_weight(f.gy, f.x, win);
    const Tensor gw_parts = by_parts(OpId::convolution_grad_weight, {f.gy, f.x}, win.ints());
    CHECK(max_abs_diff(gw, gw_parts) < 1e-5 * (1 + max_abs_diff(gw_parts, zeros_like(gw_parts))));
    // f64 against the f64 parts.
    const Operands d = operands(g, DType::f64, seed + 100);
    CHECK(max_abs_diff(convolution(d.x, d.w, d.b, win), naive_conv(g, d.x, d.w, d.b)) < 1e-11);
    CHECK(max_abs_diff(convolution_grad_input(d.gy, d.w, win, g.h, g.w),
                       by_parts(OpId::convolution_grad_input, {d.gy, d.w}, ints)) < 1e-11);
    CHECK(max_abs_diff(convolution_grad_weight(d.gy, d.x, win),
                       by_parts(OpId::convolution_grad_weight, {d.gy, d.x}, win.ints())) < 1e-10);
  }
}

TEST_CASE("convolution prims: the same bits with 1 and 2 threads") {
  const int before = cpu::num_threads();
  const Case g = kCases[1];
  const Operands f = operands(g, DType::f32, 11);
  const Window2d win = g.win();
  std::vector<Tensor> r[2];
  for (int t = 0; t < 2; ++t) {
    cpu::set_num_threads(t + 1);
    r[t] = {convolution(f.x, f.w, f.b, win, true), convolution_grad_input(f.gy, f.w, win, g.h, g.w),
            convolution_grad_weight(f.gy, f.x, win)};
  }
  cpu::set_num_threads(before);
  for (size_t i = 0; i < 3; ++i) CHECK(same_bits(r[0][i], r[1][i]));
}

TEST_CASE("conv2d_relu: fused without grad, bit for bit relu(conv2d); with grad, the same values and gradients") {
  uint32_t seed = 500;
  for (const Case& g : kCases) {
    INFO(g.label());
    const Operands f = operands(g, DType::f32, seed += 4);
    const Tensor unfused = relu(conv2d(f.x, f.w, f.b, g.options()));
    {
      NoGradGuard no_grad;
      CHECK(same_bits(conv2d_relu(f.x, f.w, f.b, g.options()), unfused));
    }
    CHECK(same_bits(conv2d_relu(f.x, f.w, Tensor(), g.options()), relu(conv2d(f.x, f.w, Tensor(), g.options()))));
    // Under grad it is relu(conv2d): the gradients of both agree.
    Tensor w1 = f.w.detach().requires_grad_(true), w2 = f.w.detach().requires_grad_(true);
    Tensor y1 = conv2d_relu(f.x, w1, f.b, g.options()), y2 = relu(conv2d(f.x, w2, f.b, g.options()));
    CHECK(same_bits(y1, y2));
    sum(mul(y1, f.gy)).backward();
    sum(mul(y2, f.gy)).backward();
    CHECK(same_bits(w1.grad(), w2.grad()));
  }
}

TEST_CASE("convolution with the ReLU fused differentiates as relu(convolution)") {
  const Case g{2, 3, 6, 7, 4, 3, 3, 1, 1, 1, 0, 1, 1};
  Tensor x = sample({g.n, g.c, g.h, g.w}, DType::f64, 21);
  Tensor w = sample({g.o, g.c, g.kh, g.kw}, DType::f64, 22);
  Tensor b = sample({g.o}, DType::f64, 23);
  const Window2d win = g.win();
  auto r = autograd::gradcheck([win](const std::vector<Tensor>& a) { return convolution(a[0], a[1], a[2], win, true); },
                               {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("the convolution gradient prims pass gradcheck themselves (second derivatives)") {
  const Case g{2, 3, 7, 6, 4, 3, 2, 2, 1, 1, 1, 1, 2};
  const Window2d win = g.win();
  const Operands d = operands(g, DType::f64, 31);
  auto gi = autograd::gradcheck(
      [&](const std::vector<Tensor>& a) { return convolution_grad_input(a[0], a[1], win, g.h, g.w); }, {d.gy, d.w});
  CHECK_MESSAGE(gi.ok, gi.message);
  auto gw = autograd::gradcheck(
      [&](const std::vector<Tensor>& a) { return convolution_grad_weight(a[0], a[1], win); }, {d.gy, d.x});
  CHECK_MESSAGE(gw.ok, gw.message);
}

TEST_CASE("convolution prims reject operands that do not fit, naming the prim") {
  const Window2d win{{3, 3}, {1, 1}, {0, 0}, {1, 1}};
  Tensor x = zeros(Shape{2, 3, 8, 8}), w = zeros(Shape{4, 3, 3, 3});
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { convolution(x, zeros(Shape{4, 2, 3, 3}), Tensor(), win); }).find("convolution") != std::string::npos);
  CHECK(message([&] { convolution(x, w, zeros(Shape{5}), win); }).find("bias") != std::string::npos);
  CHECK(message([&] { convolution_grad_weight(zeros(Shape{2, 4, 5, 6}), x, win); }).find("convolution_grad_weight") !=
        std::string::npos);
  CHECK(message([&] { convolution_grad_input(zeros(Shape{2, 4, 6, 6}), w, win, 9, 9); }).find("convolution_grad_input") !=
        std::string::npos);
  CHECK(message([&] { convolution(x, w.to(DType::f64), Tensor(), win); }).find("f32") != std::string::npos);
}
