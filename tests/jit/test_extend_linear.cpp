// The eigen_linear executor (examples/extend_linear/eigen_linear.h): its kernel
// against f64 loops, its claim of `linear` in traces, what its checker
// refuses, linear_relu, and the seed MLP trained with and without it.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "examples/extend_linear/eigen_linear.h"
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using volt_example::eigen_linear;
using volt_example::eigen_linear_executor;

namespace {

// y[i][j] = relu?(b[j] + sum_k x[i][k] w[j][k]) in f64, with the bound
// sum |x||w| + |b| that float rounding of the sum stays well inside.
struct Reference {
  std::vector<double> y, bound;
};
Reference naive_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  std::vector<double> xv = x.contiguous().to_vector<double>(), wv = w.contiguous().to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(n, 0.0);
  Reference r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[j], mag = std::fabs(bv[j]);
      for (int64_t q = 0; q < k; ++q) {
        s += xv[i * k + q] * wv[j * k + q];
        mag += std::fabs(xv[i * k + q] * wv[j * k + q]);
      }
      r.y[i * n + j] = relu ? std::max(s, 0.0) : s;
      r.bound[i * n + j] = mag;
    }
  return r;
}

// Every element within 1e-6 of its magnitude bound (float's epsilon is 1.2e-7).
void check_against(const Tensor& got, const Reference& want, const std::string& label) {
  std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.y.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(g[i] - want.y[i]) / (want.bound[i] + 1e-30));
  INFO(label << ": worst error / bound = " << worst);
  CHECK(worst < 1e-6);
}

std::vector<Tensor> linear_fn(const std::vector<Tensor>& a) { return {linear(a[0], a[1], a[2])}; }

std::string last_trace(const jit::JitFunction& f) { return jit::last_traces(f).back().str(); }

}  // namespace

TEST_CASE("eigen_linear: the kernel against f64 loops") {
  manual_seed(11);
  struct Case {
    int64_t m, k, n;
    bool bias, relu;
  };
  // Small and odd sizes, one slab and many, small batches and the wide-slab path (m > 64).
  for (Case c : {Case{1, 5, 3, true, false}, Case{8, 784, 784, true, false}, Case{8, 784, 784, true, true},
                 Case{3, 17, 45, false, false}, Case{70, 33, 130, true, true}, Case{256, 64, 300, true, false},
                 Case{5, 0, 7, true, false}}) {
    Tensor x = Tensor::randn({c.m, c.k}), w = Tensor::randn({c.n, c.k});
    Tensor b = c.bias ? Tensor::randn({c.n}) : Tensor();
    Tensor y = volt_example::eigen_linear_forward(x, w, b, c.relu);
    CHECK(y.sizes() == Shape{c.m, c.n});
    check_against(y, naive_linear(x, w, b, c.relu),
                  "m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n));
  }
  // Views are read through their strides (a transposed input and weight).
  Tensor xt = Tensor::randn({40, 6}).t(), wt = Tensor::randn({40, 9}).t(), b = Tensor::randn({9});
  REQUIRE_FALSE(xt.is_contiguous());
  check_against(volt_example::eigen_linear_forward(xt, wt, b, false), naive_linear(xt, wt, b, false), "views");
}

TEST_CASE("eigen_linear: claims linear in a trace, forward and grad") {
  jit::OperatorExecutor& ex = eigen_linear_executor();
  auto f = jit::jit(linear_fn, {.executors = {ex}});
  manual_seed(12);
  Tensor x = Tensor::randn({8, 20}), w = Tensor::randn({12, 20}), b = Tensor::randn({12});
  Tensor y = f({x, w, b})[0];
  check_against(y, naive_linear(x, w, b, false), "jitted");
  std::string s = last_trace(f);
  CHECK(s.find("t0 = eigen_linear(t_0, t_1, t_2)  # t0: \"cpu f32[8, 12]\"\n    # t0 = prims.linear(t_0, t_1, t_2)") !=
        std::string::npos);
  CHECK(s.find("\n  t0 = prims.linear") == std::string::npos);

  // Gradients are the built-in linear's: d(sum y)/dx[i][k] = sum_j w[j][k],
  // d/dw[j][k] = sum_i x[i][k], d/db[j] = batch size.
  auto g = jit::grad(f);
  std::vector<Tensor> grads = g({x, w, b});
  REQUIRE(grads.size() == 3);
  CHECK(last_trace(g).find("= eigen_linear(") == std::string::npos);  // grad of a sum needs no forward value
  std::vector<double> wv = w.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> gx = grads[0].to_vector<double>(), gw = grads[1].to_vector<double>();
  double worst = 0;
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t q = 0; q < 20; ++q) {
      double want = 0;
      for (int64_t j = 0; j < 12; ++j) want += wv[j * 20 + q];
      worst = std::max(worst, std::fabs(gx[i * 20 + q] - want));
    }
  for (int64_t j = 0; j < 12; ++j)
    for (int64_t q = 0; q < 20; ++q) {
      double want = 0;
      for (int64_t i = 0; i < 8; ++i) want += xv[i * 20 + q];
      worst = std::max(worst, std::fabs(gw[j * 20 + q] - want));
    }
  CHECK(worst < 1e-4);
  for (double v : grads[2].to_vector<double>()) CHECK(v == 8.0);

  // value_and_grad keeps the forward value, so the claimed linear runs there.
  auto vg = jit::value_and_grad(f);
  std::vector<Tensor> r = vg({x, w, b});
  REQUIRE(r.size() == 4);
  check_against(r[0], naive_linear(x, w, b, false), "value_and_grad");
  CHECK(last_trace(vg).find("= eigen_linear(t_0, t_1, t_2)") != std::string::npos);
}

TEST_CASE("eigen_linear: the checker refuses what the kernel cannot run") {
  jit::OperatorExecutor& ex = eigen_linear_executor();
  manual_seed(13);

  // f64: the built-in executor runs prims.linear.
  auto f64 = jit::jit(linear_fn, {.executors = {ex}});
  Tensor x = Tensor::randn({4, 6}, DType::f64), w = Tensor::randn({5, 6}, DType::f64), b = Tensor::randn({5}, DType::f64);
  Tensor y = f64({x, w, b})[0];
  check_against(y, naive_linear(x, w, b, false), "f64 fallback");
  std::string s = last_trace(f64);
  CHECK(s.find("eigen_linear") == std::string::npos);
  CHECK(s.find("t0 = prims.linear(t_0, t_1, t_2)") != std::string::npos);

  // A 3-D input and a bias-free call of the wrong shape: refused, and a 2-D one without bias: taken.
  auto f3 = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{linear(a[0], a[1])}; },
                     {.executors = {ex}});
  Tensor x3 = Tensor::randn({2, 3, 6}), w2 = Tensor::randn({5, 6});
  Tensor y3 = f3({x3, w2})[0];
  CHECK(y3.sizes() == Shape{2, 3, 5});
  CHECK(last_trace(f3).find("eigen_linear") == std::string::npos);
  Tensor x2 = Tensor::randn({3, 6});
  check_against(f3({x2, w2})[0], naive_linear(x2, w2, Tensor(), false), "no bias");
  CHECK(last_trace(f3).find("= eigen_linear(t_0, t_1)") != std::string::npos);

  // Other devices: the checker says no on CUDA values (proxies need no GPU).
  OpCall on_cuda{OpId::linear,
                 {Tensor::proxy({4, 6}, DType::f32, Device::cuda()), Tensor::proxy({5, 6}, DType::f32, Device::cuda()),
                  Tensor::proxy({5}, DType::f32, Device::cuda())},
                 {}};
  const auto* impl = ex.implementation_for(on_cuda);
  REQUIRE(impl != nullptr);
  CHECK_FALSE(impl->checker(on_cuda.args));
  OpCall on_cpu = on_cuda;
  for (Value& v : on_cpu.args) v = Tensor::proxy(v.tensor.sizes(), DType::f32, kCPU);
  CHECK(impl->checker(on_cpu.args));
  if (cuda::is_available()) {
    auto fc = jit::jit(linear_fn, {.executors = {ex}});
    Tensor xc = Tensor::randn({4, 6}), wc = Tensor::randn({5, 6}), bc = Tensor::randn({5});
    Tensor yc = fc({xc.to(Device::cuda()), wc.to(Device::cuda()), bc.to(Device::cuda())})[0];
    check_against(yc.to(kCPU), naive_linear(xc, wc, bc, false), "cuda fallback");
    CHECK(last_trace(fc).find("eigen_linear") == std::string::npos);
  } else {
    MESSAGE("no CUDA GPU: a traced CUDA linear is not run (the checker's answer on CUDA proxies is checked)");
  }
}

TEST_CASE("eigen_linear: linear_relu runs fused without gradients and opens up under grad") {
  jit::OperatorExecutor& ex = eigen_linear_executor();
  jit::Symbol linear_relu = eigen_linear().linear_relu;
  auto f = jit::jit([&](const std::vector<Tensor>& a) { return linear_relu(a[0], a[1], a[2]); }, {.executors = {ex}});
  manual_seed(14);
  Tensor x = Tensor::randn({6, 10}), w = Tensor::randn({7, 10}), b = Tensor::randn({7});
  check_against(f({x, w, b})[0], naive_linear(x, w, b, true), "linear_relu");
  CHECK(last_trace(f).find(" = linear_relu(t_0, t_1, t_2)  # ") != std::string::npos);
  check_against(linear_relu(x, w, b)[0], naive_linear(x, w, b, true), "eager linear_relu");

  // Under grad, ReLU's backward needs the mask inside linear_relu: the
  // forward shows its parts, the linear still claimed as eigen_linear.
  auto g = jit::value_and_grad(f);
  std::vector<Tensor> r = g({x, w, b});
  REQUIRE(r.size() == 4);
  check_against(r[0], naive_linear(x, w, b, true), "linear_relu under grad");
  std::string s = last_trace(g);
  CHECK(s.find("= eigen_linear(t_0, t_1, t_2)") != std::string::npos);
  // d(sum relu(y))/db[j] = number of rows where y[i][j] > 0.
  Reference ref = naive_linear(x, w, b, false);
  std::vector<double> gb = r[3].to_vector<double>();
  for (int64_t j = 0; j < 7; ++j) {
    double count = 0;
    for (int64_t i = 0; i < 6; ++i) count += ref.y[i * 7 + j] > 0 ? 1 : 0;
    CHECK(gb[j] == count);
  }
}

TEST_CASE("eigen_linear: the seed MLP trains the same with and without it") {
  const std::vector<int64_t> widths{784, 784, 784, 28, 10};
  manual_seed(0);
  auto net_a = std::make_shared<nn::MLP>(784, widths, true, 0.1);
  manual_seed(0);
  auto net_b = std::make_shared<nn::MLP>(784, widths, true, 0.1);
  auto ja = jit::jit(net_a, {.executors = {eigen_linear_executor()}});
  auto jb = jit::jit(net_b);
  nn::CrossEntropyLoss loss_fn;
  manual_seed(15);
  Tensor x = Tensor::rand({8, 784}), y = Tensor::randint(0, 10, {8});
  manual_seed(16);
  Tensor la = loss_fn(ja(x), y);
  la.backward();
  manual_seed(16);
  Tensor lb = loss_fn(jb(x), y);
  lb.backward();
  CHECK(std::fabs(la.item<double>() - lb.item<double>()) <= 1e-5 * std::fabs(lb.item<double>()));
  std::string s = last_trace(ja);
  size_t claimed = 0;
  for (size_t at = s.find("= eigen_linear("); at != std::string::npos; at = s.find("= eigen_linear(", at + 1)) ++claimed;
  CHECK(claimed == 5);
  auto pa = net_a->named_parameters(), pb = net_b->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<double> ga = pa[i].second.grad().to_vector<double>(), gb = pb[i].second.grad().to_vector<double>();
    double worst = 0, scale = 0;
    for (size_t k = 0; k < ga.size(); ++k) {
      worst = std::max(worst, std::fabs(ga[k] - gb[k]));
      scale = std::max(scale, std::fabs(gb[k]));
    }
    INFO(pa[i].first << ": max |difference| " << worst << ", max |gradient| " << scale);
    CHECK(worst <= 1e-5 * scale);
  }
}
