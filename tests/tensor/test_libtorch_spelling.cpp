// LibTorch's spellings of tensor-level names: Slice with None, device types,
// the method forms of common ops, reductions over an int dim, shapes printed
// through argument-dependent lookup, and nll_loss's weight argument.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include <volt/tensor/factories.h>
#include <volt/tensor/indexing.h>
#include <volt/tensor/ops.h>

#include "error_of.h"

namespace user_code {
// Not `using namespace volt`: the printer must be found by argument-dependent lookup.
std::string printed_sizes(const volt::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}
}  // namespace user_code

using namespace volt;

namespace {
std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("Slice takes None as LibTorch spells it") {
  using namespace volt::indexing;
  Tensor a = Tensor::arange(12, DType::f32).reshape({3, 4});
  CHECK(values(a.index({Slice(1, None)})) == values(a.index({Slice(1)})));
  CHECK(a.index({Slice(1, None)}).sizes() == Shape{2, 4});
  CHECK(values(a.index({Slice(None, -1)})) == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(values(a.index({Slice(None, None), Slice(None, 2)})) == std::vector<float>{0, 1, 4, 5, 8, 9});
  CHECK(values(a.index({Ellipsis, Slice(-1, None)})) == std::vector<float>{3, 7, 11});
  CHECK(a.index({None, Slice(), 0}).sizes() == Shape{1, 3});
  CHECK(a.index({volt::indexing::Slice(std::nullopt, 1)}).sizes() == Shape{1, 4});
  const size_t two = 2;
  CHECK(a.index({Slice(two, None)}).sizes() == Shape{1, 4});
}

TEST_CASE("kCPU and kCUDA are device types; Device(kCUDA, 1) is a device") {
  Device d(kCUDA, 1);
  CHECK(d.is_cuda());
  CHECK(d.index == 1);
  CHECK(Device(kCPU) == Device::cpu());
  CHECK(Device(kCUDA).str() == "cuda:0");
  Device from_type = kCPU;
  CHECK(from_type.is_cpu());
  std::ostringstream os;
  os << kCUDA << " " << Device(kCUDA, 2) << " " << kCPU;
  CHECK(os.str() == "cuda:0 cuda:2 cpu");
  CHECK(zeros({2}).to(kCPU).device().is_cpu());
}

TEST_CASE("shapes print through argument-dependent lookup and stay vectors") {
  Tensor t = zeros({8, 784});
  CHECK(user_code::printed_sizes(t) == "[8, 784]");
  const std::vector<int64_t>& as_vector = t.sizes();
  CHECK(as_vector == std::vector<int64_t>{8, 784});
  Shape s = std::vector<int64_t>{2, 3};
  s.push_back(4);
  CHECK(shape_numel(s) == 24);
  CHECK(shape_str(s) == "[2, 3, 4]");
}

TEST_CASE("the method forms of comparisons, math and reductions equal f64 loops") {
  const std::vector<double> a{-2.0, -0.5, 0.0, 1.5, 3.0, 0.25};
  const std::vector<double> b{1.0, -0.5, 2.0, 1.0, 3.0, -4.0};
  Tensor ta = Tensor::from_vector<double>(a, {2, 3});
  Tensor tb = Tensor::from_vector<double>(b, {2, 3});
  auto bools = [](const Tensor& t) { return t.to(DType::i64).to_vector<int64_t>(); };
  std::vector<int64_t> eq, ne, lt, le, gt, ge, gt0;
  std::vector<double> absv, pow2, powb;
  for (size_t i = 0; i < a.size(); ++i) {
    eq.push_back(a[i] == b[i]), ne.push_back(a[i] != b[i]), lt.push_back(a[i] < b[i]);
    le.push_back(a[i] <= b[i]), gt.push_back(a[i] > b[i]), ge.push_back(a[i] >= b[i]);
    gt0.push_back(a[i] > 0);
    absv.push_back(std::fabs(a[i]));
    pow2.push_back(a[i] * a[i]);
    powb.push_back(std::pow(std::fabs(a[i]) + 1, b[i]));
  }
  CHECK(bools(ta.eq(tb)) == eq);
  CHECK(bools(ta.ne(tb)) == ne);
  CHECK(bools(ta.lt(tb)) == lt);
  CHECK(bools(ta.le(tb)) == le);
  CHECK(bools(ta.gt(tb)) == gt);
  CHECK(bools(ta.ge(tb)) == ge);
  CHECK(bools(ta.gt(0)) == gt0);
  CHECK(ta.eq(tb).dtype() == DType::b8);
  CHECK(ta.abs().to_vector<double>() == absv);
  CHECK(ta.pow(2).to_vector<double>() == pow2);
  const auto got = (ta.abs() + 1.0).pow(tb).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(got[i] == doctest::Approx(powb[i]).epsilon(1e-12));
  CHECK(ta.max().item<double>() == 3.0);
  CHECK(ta.min().item<double>() == -2.0);
  CHECK(ta.argmax().item<int64_t>() == 4);
  // Reductions with a plain int dim, as LibTorch's IntArrayRef takes one.
  CHECK(ta.sum(1).to_vector<double>() == std::vector<double>{-2.5, 4.75});
  CHECK(ta.sum(0, true).sizes() == Shape{1, 3});
  const auto means = ta.mean(1).to_vector<double>();
  CHECK(means[0] == doctest::Approx(-2.5 / 3).epsilon(1e-15));
  CHECK(means[1] == doctest::Approx(4.75 / 3).epsilon(1e-15));
  CHECK(ta.sum({0, 1}).item<double>() == doctest::Approx(2.25));
  const size_t unsigned_dim = 1;
  CHECK(ta.sum(unsigned_dim).to_vector<double>() == ta.sum(int64_t{1}).to_vector<double>());
  CHECK(ta.sum().item<double>() == doctest::Approx(2.25));
  // eq(...).sum() counts, as LibTorch's pred.eq(target).sum().item<int64_t>().
  CHECK(ta.eq(tb).sum().item<int64_t>() == 2);
}

TEST_CASE("nll_loss takes LibTorch's (input, target, weight, reduction, ignore_index)") {
  const int64_t n = 5, c = 3;
  const std::vector<double> logp{-0.1, -2.0, -3.0, -1.5, -0.3, -2.2, -0.7, -0.9, -1.1,
                                 -2.5, -0.2, -1.9, -0.6, -1.4, -0.8};
  const std::vector<int64_t> target{0, 2, 1, -100, 2};
  const std::vector<double> w{0.5, 2.0, 1.5};
  Tensor x = Tensor::from_vector<double>(logp, {n, c});
  Tensor t = Tensor::from_vector<int64_t>(target, {n});
  Tensor tw = Tensor::from_vector<double>(w, {c});
  // The f64 reference: -w[t_i] logp[i, t_i] over the rows not ignored; Mean over sum of w[t_i].
  std::vector<double> rows(n, 0.0);
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == -100) continue;
    rows[i] = -w[target[i]] * logp[i * c + target[i]];
    sum += rows[i];
    wsum += w[target[i]];
  }
  CHECK(nll_loss(x, t, tw).item<double>() == doctest::Approx(sum / wsum).epsilon(1e-12));
  CHECK(nll_loss(x, t, tw, Reduction::Sum).item<double>() == doctest::Approx(sum).epsilon(1e-12));
  const auto none = nll_loss(x, t, tw, Reduction::None).to_vector<double>();
  for (int64_t i = 0; i < n; ++i) CHECK(none[i] == doctest::Approx(rows[i]).epsilon(1e-12));
  // {} is "no weight", as in LibTorch: the plain mean over the rows not ignored.
  double plain = 0;
  for (int64_t i = 0; i < n; ++i)
    if (target[i] != -100) plain -= logp[i * c + target[i]];
  CHECK(nll_loss(x, t, {}).item<double>() == doctest::Approx(plain / 4).epsilon(1e-12));
  // The gradient flows to the input through the weighted loss: -w[t_i] / sum w at (i, t_i).
  Tensor leaf = x.clone().requires_grad_();
  nll_loss(leaf, t, tw).backward();
  const auto g = leaf.grad().to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const double want = (target[i] == j) ? -w[j] / wsum : 0.0;
      CHECK(g[i * c + j] == doctest::Approx(want).epsilon(1e-12));
    }
  CHECK(testing::error_of([&] { nll_loss(x, t, Tensor::ones({4}, DType::f64)); }).find("weight must be (C) = (3)") !=
        std::string::npos);
  CHECK(testing::error_of([&] {
          nll_loss(x, Tensor::from_vector<int64_t>({0, 1, 3, 0, 0}, {5}), tw);
        }) != "");
}
