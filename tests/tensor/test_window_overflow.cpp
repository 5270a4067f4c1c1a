// Window arithmetic that would wrap 64 bits (a dilation of 2^62 makes the
// dilated kernel's span wrap to 1) is refused with an error naming the op,
// for convolutions and pools alike, instead of a crash or garbage.
#include <doctest/doctest.h>

#include "tests/error_of.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <volt/tensor/conv.h>
#include <volt/tensor/error.h>
#include <volt/tensor/factories.h>

using namespace volt;

using volt::testing::error_of;

TEST_CASE("window ops: a dilation, padding or kernel that overflows 64 bits is an error naming the op") {
  const Tensor x = Tensor::rand({1, 1, 8, 8}, DType::f32);
  const Tensor w = Tensor::rand({1, 1, 3, 3}, DType::f32);
  const int64_t huge = int64_t{1} << 62;
  Conv2dOptions o;
  o.dilation = {huge, 1};
  std::string e = error_of([&] { conv2d(x, w, Tensor(), o); });
  CHECK(e.find("conv") != std::string::npos);
  CHECK(e.find("overflows 64 bits") != std::string::npos);
  e = error_of([&] { max_pool2d(x, {3, 3}, {1, 1}, {0, 0}, {1, huge}); });
  CHECK(e.find("max_pool2d") != std::string::npos);
  CHECK(e.find("overflows 64 bits") != std::string::npos);
  // Padding that doubles past 2^63.
  o = Conv2dOptions();
  o.padding = {huge + 1, 0};
  e = error_of([&] { conv2d(x, w, Tensor(), o); });
  CHECK(e.find("overflows 64 bits") != std::string::npos);
  // A large but representable window still gets the ordinary message.
  o = Conv2dOptions();
  o.dilation = {1000, 1};
  e = error_of([&] { conv2d(x, w, Tensor(), o); });
  CHECK(e.find("larger than the padded input") != std::string::npos);
}

TEST_CASE("window ops: the backward prims refuse a window that overflows 64 bits too") {
  const Tensor x = Tensor::rand({1, 1, 8, 8}, DType::f32);
  const Tensor w = Tensor::rand({1, 1, 3, 3}, DType::f32);
  const Tensor g = Tensor::rand({1, 1, 6, 6}, DType::f32);
  const int64_t huge = int64_t{1} << 62;
  const Window2d win{{3, 3}, {1, 1}, {0, 0}, {huge, 1}};
  for (const auto& [name, run] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"convolution_grad_input", [&] { convolution_grad_input(g, w, win, 8, 8); }},
           {"convolution_grad_weight", [&] { convolution_grad_weight(g, x, win); }},
           {"max_pool2d_backward", [&] { max_pool2d_backward(g, x, win); }},
           {"col2im", [&] { col2im(Tensor::rand({1, 9, 36}, DType::f32), win, 8, 8); }},
           {"im2col", [&] { im2col(x, win); }}}) {
    CAPTURE(name);
    const std::string e = error_of(run);
    CHECK(e.find(name) != std::string::npos);
    CHECK(e.find("overflows 64 bits") != std::string::npos);
  }
}
