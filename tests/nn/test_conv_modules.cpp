// Conv2d, MaxPool2d and Flatten modules: printed forms, PyTorch's default
// initialisation bounds, and that they compute the functional ops.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include <volt/data/transforms.h>
#include <volt/nn/activation.h>
#include <volt/nn/conv.h>
#include <volt/nn/functional.h>
#include <volt/nn/sequential.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/error_of.h"

using namespace volt;
using volt::testing::error_of;

TEST_CASE("Conv2d, MaxPool2d and Flatten print as PyTorch's") {
  CHECK(nn::Conv2d(1, 32, 3, 1).repr() == "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");
  CHECK(nn::Conv2d(3, 8, {3, 5}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 2}, .bias = false}).repr() ==
        "Conv2d(3, 8, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), dilation=(2, 2), bias=False)");
  CHECK(nn::MaxPool2d(2).repr() == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(nn::MaxPool2d({3, 2}, {1, 2}).repr() ==
        "MaxPool2d(kernel_size=(3, 2), stride=(1, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)");
  CHECK(nn::Flatten().repr() == "Flatten(start_dim=1, end_dim=-1)");
}

TEST_CASE("Conv2d: parameters of PyTorch's shapes and default bounds; forward is F::conv2d") {
  manual_seed(3);
  nn::Conv2d conv(32, 64, 3);
  auto named = conv.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[0].second.sizes() == Shape{64, 32, 3, 3});
  CHECK(named[1].second.sizes() == Shape{64});
  const double bound = 1.0 / std::sqrt(32.0 * 9);  // 1 / sqrt(fan_in)
  for (const Tensor& t : conv.parameters()) {
    CHECK(t.requires_grad());
    CHECK(amax(abs(t)).item<double>() <= bound);
    CHECK(amax(abs(t)).item<double>() > 0.9 * bound);  // the whole range is used
  }
  Tensor x = Tensor::randn({2, 32, 6, 5});
  namespace F = nn::functional;
  CHECK(amax(abs(sub(conv(x), F::conv2d(x, conv.weight(), conv.bias())))).item<double>() == 0);
  nn::MaxPool2d pool(2);
  CHECK(pool(x).sizes() == Shape{2, 32, 3, 2});
  CHECK(amax(abs(sub(pool(x), F::max_pool2d(x, 2)))).item<double>() == 0);
  CHECK(nn::Flatten()(x).sizes() == Shape{2, 32 * 30});
}

TEST_CASE("Normalize and the image-shaped view of a dataset") {
  Tensor x = Tensor::from_vector<float>({0, 0.5f, 1, 0.25f}, {1, 4});
  Tensor y = data::Normalize({0.1307}, {0.3081})(x);
  std::vector<float> v = y.to_vector<float>();
  CHECK(v[1] == doctest::Approx((0.5 - 0.1307) / 0.3081).epsilon(1e-6));
  // Per channel over dim 1 of (N, C, H, W).
  Tensor img = Tensor::ones({2, 3, 2, 2});
  Tensor n = data::Normalize({0.5, 1.0, 0.0}, {0.5, 2.0, 4.0})(img);
  CHECK(n.select(1, 0).to_vector<float>() == std::vector<float>(8, 1.0f));
  CHECK(n.select(1, 1).to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(n.select(1, 2).to_vector<float>() == std::vector<float>(8, 0.25f));
  CHECK_THROWS_WITH_AS(data::Normalize({0.5, 1.0}, {0.5, 2.0})(img),
                       doctest::Contains("Normalize: expected 2 channels"), Error);
  CHECK_THROWS_WITH_AS(data::Normalize({0.5}, {0.0}), doctest::Contains("Normalize: std must not be 0"), Error);

  data::TensorDataset flat(Tensor::arange(0, 2 * 784, 1, DType::f32).reshape({2, 784}),
                           Tensor::from_vector<int64_t>({3, 7}));
  data::TensorDataset images = data::with_sample_shape(flat, {1, 28, 28});
  CHECK(images.sample_shape() == Shape{1, 28, 28});
  CHECK(images.size() == 2);
  CHECK(images.get(1).data.sizes() == Shape{1, 28, 28});
  CHECK(images.get(1).data.to_vector<float>()[29] == 784 + 29);
  CHECK(images.get(1).target.item<int64_t>() == 7);
  CHECK_THROWS_WITH_AS(data::with_sample_shape(flat, {1, 27, 28}), doctest::Contains("with_sample_shape"), Error);
}

TEST_CASE("Conv2dOptions(1, 10, 5).stride(2), LibTorch's spelling, builds the designated-initialiser layer") {
  const nn::Conv2dOptions d(1, 10, 5);  // LibTorch's defaults
  CHECK(d.in_channels() == 1);
  CHECK(d.out_channels() == 10);
  CHECK(d.kernel_size() == std::array<int64_t, 2>{5, 5});
  CHECK(d.stride() == std::array<int64_t, 2>{1, 1});
  CHECK(d.padding() == std::array<int64_t, 2>{0, 0});
  CHECK(d.dilation() == std::array<int64_t, 2>{1, 1});
  CHECK(d.bias());
  struct Case {
    nn::Conv2dOptions chained;
    std::array<int64_t, 2> kernel;
    nn::Conv2dArgs args;
  };
  const std::vector<Case> cases = {
      {nn::Conv2dOptions(1, 10, 5), {5, 5}, {}},
      {nn::Conv2dOptions(1, 10, 5).stride(2), {5, 5}, {.stride = {2, 2}}},
      {nn::Conv2dOptions(3, 4, {3, 2}).stride({2, 1}).padding(1).dilation({1, 2}).bias(false), {3, 2},
       {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .bias = false}},
  };
  const Tensor x = Tensor::randn({2, 3, 12, 11});
  for (size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const Case& k = cases[c];
    manual_seed(7);
    nn::Conv2d a(k.chained);
    manual_seed(7);
    nn::Conv2d b(k.chained.in_channels(), k.chained.out_channels(), k.kernel, k.args);
    CHECK(a.repr() == b.repr());
    const auto pa = a.named_parameters(), pb = b.named_parameters();
    REQUIRE(pa.size() == (k.args.bias ? 2u : 1u));
    REQUIRE(pb.size() == pa.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      CHECK(pa[i].first == pb[i].first);
      CHECK(pa[i].second.sizes() == pb[i].second.sizes());
      CHECK(equal(pa[i].second, pb[i].second));
    }
    const Tensor in = x.narrow(1, 0, k.chained.in_channels()).contiguous();
    const Tensor ya = a.forward(in);
    CHECK(equal(ya, b.forward(in)));
    // The functional op with the same geometry, an independent reference.
    const Tensor want = conv2d(in, a.weight(), a.bias(),
                               volt::Conv2dOptions{k.args.stride, k.args.padding, k.args.dilation, 1});
    CHECK(equal(ya, want));
  }
  CHECK(nn::Conv2d(nn::Conv2dOptions(1, 10, 5).stride(2)).repr() == "Conv2d(1, 10, kernel_size=(5, 5), stride=(2, 2))");
  const std::string bad_stride = error_of([] { nn::Conv2d(nn::Conv2dOptions(1, 10, 5).stride(0)); });
  CHECK(bad_stride.find("Conv2d: expected positive stride and dilation and padding >= 0, got stride=(0, 0)") !=
        std::string::npos);
  CHECK(error_of([] { nn::Conv2d(1, 10, {5, 5}, {.padding = {-1, 0}}); }).find("padding=(-1, 0)") != std::string::npos);
}
