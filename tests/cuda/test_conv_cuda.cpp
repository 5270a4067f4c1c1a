// The window prims' CUDA kernels: their sources compile with NVRTC for
// compute_80 and compute_90 (no GPU needed), and on a GPU (or the simulated
// one of tests/cudasim) they, conv2d and its gradients equal the CPU.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>

#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/cuda/conv.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"
#include "tests/skip.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("nvrtc: the window kernels (im2col, col2im, max_pool2d and its gradient) compile for compute_80/90") {
  std::string src = cuda::prelude();
  for (OpId op : {OpId::im2col, OpId::col2im, OpId::max_pool2d, OpId::max_pool2d_backward})
    for (DType t : {DType::f32, DType::f64}) src += cuda::window_source(op, t) + "\n";
  for (const char* arch : {"compute_80", "compute_90"}) {
    std::string ptx;
    CHECK_NOTHROW(ptx = cuda::compile_ptx(src, arch));
    CHECK(ptx.find(".entry volt_im2col_f32") != std::string::npos);
    CHECK(ptx.find(".entry volt_max_pool2d_backward_f64") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(cuda::window_source(OpId::im2col, DType::i32), doctest::Contains("im2col: expected f32 or f64"),
                       Error);
}

TEST_CASE("cuda: im2col, col2im, max_pool2d and its gradient equal the CPU's (strides, padding, dilation)") {
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  const Window2d windows[] = {{{3, 3}, {1, 1}, {0, 0}, {1, 1}},
                              {{2, 2}, {2, 2}, {0, 0}, {1, 1}},
                              {{3, 2}, {2, 1}, {1, 1}, {1, 2}},
                              {{3, 3}, {2, 3}, {1, 0}, {2, 1}}};
  uint32_t seed = 1;
  for (DType t : {DType::f32, DType::f64})
    for (const Window2d& w : windows) {
      INFO(dtype_name(t) << " kernel " << w.kernel[0] << "x" << w.kernel[1] << " stride " << w.stride[0] << ","
                         << w.stride[1] << " padding " << w.padding[0] << "," << w.padding[1]);
      Tensor x = volt::testing::sample({2, 3, 9, 7}, t, seed++);
      // A tie inside windows: the first maximum takes the gradient on both devices.
      x.narrow(3, 1, 1).copy_(x.narrow(3, 0, 1));
      Tensor xg = x.to(kGpu);
      Tensor cols = im2col(x, w);
      CHECK(max_abs_diff(im2col(xg, w).to(kCPU), cols) == 0);
      Tensor c = volt::testing::sample(cols.sizes(), t, seed++);
      CHECK(max_abs_diff(col2im(c.to(kGpu), w, 9, 7).to(kCPU), col2im(c, w, 9, 7)) == 0);
      if (w.padding[0] * 2 <= w.kernel[0] && w.padding[1] * 2 <= w.kernel[1]) {
        Tensor y = max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation);
        CHECK(max_abs_diff(max_pool2d(xg, w.kernel, w.stride, w.padding, w.dilation).to(kCPU), y) == 0);
        Tensor gy = volt::testing::sample(y.sizes(), t, seed++);
        CHECK(max_abs_diff(max_pool2d_backward(gy.to(kGpu), xg, w).to(kCPU), max_pool2d_backward(gy, x, w)) == 0);
      }
    }
}

TEST_CASE("cuda: the convolution prims (with bias, with the ReLU, and their gradients) equal the CPU's") {
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  const Window2d windows[] = {{{3, 3}, {1, 1}, {0, 0}, {1, 1}}, {{3, 2}, {2, 1}, {1, 1}, {1, 2}}};
  uint32_t seed = 70;
  for (DType t : {DType::f32, DType::f64})
    for (const Window2d& w : windows) {
      INFO(dtype_name(t) << " kernel " << w.kernel[0] << "x" << w.kernel[1] << " stride " << w.stride[0]);
      const double tol = t == DType::f32 ? 1e-4 : 1e-11;
      Tensor x = volt::testing::sample({3, 4, 9, 8}, t, seed++);
      Tensor wt = volt::testing::sample({5, 4, w.kernel[0], w.kernel[1]}, t, seed++);
      Tensor b = volt::testing::sample({5}, t, seed++);
      for (bool relu : {false, true}) {
        Tensor y = convolution(x, wt, b, w, relu);
        CHECK(max_abs_diff(convolution(x.to(kGpu), wt.to(kGpu), b.to(kGpu), w, relu).to(kCPU), y) < tol);
      }
      Tensor gy = volt::testing::sample(convolution(x, wt, b, w).sizes(), t, seed++);
      CHECK(max_abs_diff(convolution_grad_input(gy.to(kGpu), wt.to(kGpu), w, 9, 8).to(kCPU),
                         convolution_grad_input(gy, wt, w, 9, 8)) < tol);
      CHECK(max_abs_diff(convolution_grad_weight(gy.to(kGpu), x.to(kGpu), w).to(kCPU),
                         convolution_grad_weight(gy, x, w)) < tol);
    }
}

TEST_CASE("cuda: the tutorial's CNN trains on the GPU as on the CPU (3 Adadelta steps)") {
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  manual_seed(11);
  auto cpu_net = std::make_shared<nn::MnistCNN>();
  manual_seed(11);
  auto gpu_net = std::make_shared<nn::MnistCNN>();
  gpu_net->to(kGpu);
  cpu_net->eval();  // no dropout: the comparison is of the kernels
  gpu_net->eval();
  nn::Adadelta cpu_opt(cpu_net->parameters()), gpu_opt(gpu_net->parameters());
  manual_seed(3);
  for (int step = 0; step < 3; ++step) {
    Tensor x = Tensor::randn({2, 1, 28, 28});
    Tensor y = Tensor::randint(0, 10, {2});
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    Tensor lc = nll_loss((*cpu_net)(x), y);
    Tensor lg = nll_loss((*gpu_net)(x.to(kGpu)), y.to(kGpu));
    lc.backward();
    lg.backward();
    CHECK(std::fabs(lg.item<double>() - lc.item<double>()) < 1e-5);
    cpu_opt.step();
    gpu_opt.step();
  }
  auto pc = cpu_net->parameters(), pg = gpu_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i) CHECK(max_abs_diff(pg[i].to(kCPU), pc[i]) < 1e-5);
}
#endif
