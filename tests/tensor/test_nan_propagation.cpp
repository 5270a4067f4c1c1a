// NaN goes through relu, amax, max_pool2d and clamp as PyTorch's documented
// rules say (torch.maximum and torch.amax propagate NaN; relu is max(0, x);
// max_pool2d takes a window's maximum; clamp of NaN is NaN): eager on the CPU,
// in the jit's generated kernels, in the fused GEMM and convolution epilogues,
// and on CUDA.  The reference is relu_ref (tests/tensor/reference.h), written
// from that rule, never the library's own code.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/ops.h>

#include "cuda/skip_without_gpu.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::relu_ref;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
const std::vector<float> kValues{kNaN, -1.5f, 0.0f, -0.0f, 2.5f, kInf, -kInf, kNaN, 3.0f};

// NaN where the reference is NaN, else equal.
bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isnan(want[i]) ? !std::isnan(got[i]) : got[i] != want[i]) return false;
  return true;
}

std::vector<double> relu_of(const std::vector<float>& v) {
  std::vector<double> r;
  for (float x : v) r.push_back(relu_ref(static_cast<double>(x)));
  return r;
}

// The checks on `dev`: relu, amax, max_pool2d, clamp, eager then jitted.
void check_all(Device dev) {
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = Tensor::from_vector<float>(kValues).to(dt).to(dev);
    CHECK(same(relu(x).to(kCPU).to_vector<double>(), relu_of(kValues)));
    auto jitted = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{relu(mul(a[0], 1.0))}; },
                           {"x"});
    CHECK(same(jitted(x).to(kCPU).to_vector<double>(), relu_of(kValues)));
    // amax: a row with a NaN is NaN, the others their maximum.
    const Tensor rows = Tensor::from_vector<float>({1.0f, kNaN, 3.0f, -2.0f, 5.0f, 4.0f}).reshape({2, 3}).to(dt).to(dev);
    CHECK(same(rows.amax({1}).to(kCPU).to_vector<double>(), {kNaN, 5.0}));
    auto jit_amax = jit::jit(
        [](const std::vector<Tensor>& a) { return std::vector<Tensor>{amax(add(a[0], 0.0), {1})}; }, {"x"});
    CHECK(same(jit_amax(rows).to(kCPU).to_vector<double>(), {kNaN, 5.0}));
    // max_pool2d 2x2: the window holding the NaN is NaN.
    const Tensor img = Tensor::from_vector<float>({1, 2, 3, 4, kNaN, 0, 7, 8, 1, 1, 1, 1, 1, 1, 1, 9})
                           .reshape({1, 1, 4, 4})
                           .to(dt)
                           .to(dev);
    CHECK(same(max_pool2d(img, {2, 2}).to(kCPU).to_vector<double>(), {kNaN, 8, 1, 9}));
    // clamp of NaN is NaN; the bounds hold elsewhere.
    CHECK(same(clamp(x, -1.0, 1.0).to(kCPU).to_vector<double>(), {kNaN, -1, 0, 0, 1, 1, -1, kNaN, 1}));
  }
}

}  // namespace

TEST_CASE("nan: relu, amax, max_pool2d and clamp propagate NaN as PyTorch (CPU, eager and jit)") {
  check_all(kCPU);
}

TEST_CASE("nan: the fused GEMM and convolution ReLU epilogues keep NaN") {
  // relu(x W^T + b) with a NaN in one row of x: that row is NaN throughout.
  const Tensor x = Tensor::from_vector<float>({1, 2, kNaN, -1, 0.5f, 2, -3, 1}).reshape({2, 4});
  const Tensor w = Tensor::from_vector<float>({1, -1, 0.5f, 2, -1, 1, 1, -2, 0.25f, 0.5f, -0.5f, 1}).reshape({3, 4});
  const Tensor b = Tensor::from_vector<float>({0.1f, -0.2f, 0.3f});
  std::vector<double> want;
  for (double v : linear(x, w, b).to_vector<double>()) want.push_back(relu_ref(v));
  REQUIRE(std::isnan(want[0]));
  auto fused = jit::jit(
      [](const std::vector<Tensor>& a) { return std::vector<Tensor>{relu(linear(a[0], a[1], a[2]))}; }, {"x", "w", "b"});
  CHECK(same(fused({x, w, b}).at(0).to_vector<double>(), want));
  // conv2d_relu without grad: one kernel with the ReLU in its store.
  NoGradGuard no_grad;
  const Tensor img = Tensor::from_vector<float>({1, -2, 3, kNaN, 5, -6, 7, 8, -9}).reshape({1, 1, 3, 3});
  const Tensor k = Tensor::from_vector<float>({1, 0, 0, -1}).reshape({1, 1, 2, 2});
  std::vector<double> conv_want;
  for (double v : conv2d(img, k).to_vector<double>()) conv_want.push_back(relu_ref(v));
  CHECK(same(conv2d_relu(img, k).to_vector<double>(), conv_want));
  CHECK(std::isnan(conv_want[0]));
}

TEST_CASE("cuda: relu, amax, max_pool2d and clamp propagate NaN as PyTorch") {
  SKIP_WITHOUT_GPU();
  check_all(Device::cuda(0));
}
