// nn::functional::linear_relu_dropout against the chain dropout(relu(linear(.)))
// it replaces: the same bits forward and backward for the same generator state
// (and the generator left in the same state), on every instruction set and
// thread count; an f64 gradcheck; the mask doing what dropout does.
#include <doctest/doctest.h>

#include "sanitized.h"

#include <cstring>
#include <string>
#include <vector>

#include <volt/autograd/gradcheck.h>
#include <volt/autograd/node.h>
#include <volt/nn/activation.h>
#include <volt/nn/functional.h>
#include <volt/nn/linear.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;
namespace F = volt::nn::functional;

namespace {

struct Restore {
  cpu::Isa isa = cpu::isa();
  int threads = cpu::num_threads();
  ~Restore() {
    cpu::set_isa(isa);
    cpu::set_num_threads(threads);
  }
};

// Elements whose bits differ (f32 or f64 tensors of one shape).
int64_t bits_differ(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.dtype() == b.dtype());
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t width = a.dtype() == DType::f64 ? 8 : 4;
  const char* pa = static_cast<const char*>(ac.raw_data());
  const char* pb = static_cast<const char*>(bc.raw_data());
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) differ += std::memcmp(pa + i * width, pb + i * width, width) != 0;
  return differ;
}

struct Run {
  Tensor y, gx, gw, gb;
  PhiloxState after;
};

// One forward and backward, fused or as the chain, from generator state (seed 77, offset 5).
Run run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& r, double p, bool training) {
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
  Tensor b = b0.defined() ? b0.detach().requires_grad_() : Tensor();
  set_rng_state({77, 5});
  Tensor y = fused ? F::linear_relu_dropout(x, w, b, p, training) : dropout(relu(linear(x, w, b)), p, training);
  Run out{y.detach(), {}, {}, {}, rng_state()};
  sum(mul(y, r)).backward();
  out.gx = x.grad();
  out.gw = w.grad();
  if (b.defined()) out.gb = b.grad();
  return out;
}

}  // namespace

TEST_CASE("linear_relu_dropout: the chain's bits, forward and backward, every instruction set and thread count") {
  Restore restore;
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  // Skinny (8 rows: the dot kernel), packed (70 rows, two k-blocks at 450), a
  // 3-D input, no bias, and a width of 784 (the seed model's).
  const std::vector<Case> cases = {{{8, 784}, 784, true}, {{70, 450}, 45, true}, {{2, 5, 17}, 9, true},
                                   {{33, 20}, 70, false}, {{1, 3}, 2, true}};
  std::vector<cpu::Isa> isas;
  for (cpu::Isa i : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512})
    if (cpu::isa_supported(i)) isas.push_back(i);
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& cs : cases) {
      Shape ys = cs.x;
      ys.back() = cs.out;
      const Tensor x = sample(cs.x, dt, 11), w = sample({cs.out, cs.x.back()}, dt, 12);
      const Tensor b = cs.bias ? sample({cs.out}, dt, 13) : Tensor(), r = sample(ys, dt, 14);
      for (double p : {0.0, 0.1, 0.5, 1.0})
        for (bool training : {true, false})
          for (cpu::Isa isa : isas)
            for (int threads : {1, 2, 3}) {
              if (!training && (p == 0.1 || p == 1.0)) continue;  // eval ignores p
              // Under the sanitizers: every instruction set, split over 3 threads, p 0 and 0.5
              // (evaluation once: it ignores p), and the width of 784 in f32 alone (the
              // smaller cases take f64's paths: skinny, packed, 3-D, no bias).
              if (volt::testing::kSanitized && (threads != 3 || p == 0.1 || p == 1.0 || (!training && p != 0.0) ||
                                                (dt == DType::f64 && cs.out == 784)))
                continue;
              cpu::set_isa(isa);
              cpu::set_num_threads(threads);
              const std::string label = std::string(dtype_name(dt)) + " " + shape_str(cs.x) + " -> " +
                                        std::to_string(cs.out) + " p=" + std::to_string(p) +
                                        " training=" + std::to_string(training) + " " + cpu::isa_name(isa) +
                                        " threads=" + std::to_string(threads);
              INFO(label);
              const Run fused = run(true, x, w, b, r, p, training), chain = run(false, x, w, b, r, p, training);
              CHECK(fused.after.seed == chain.after.seed);
              CHECK(fused.after.offset == chain.after.offset);
              CHECK(bits_differ(fused.y, chain.y) == 0);
              CHECK(bits_differ(fused.gx, chain.gx) == 0);
              CHECK(bits_differ(fused.gw, chain.gw) == 0);
              if (cs.bias) CHECK(bits_differ(fused.gb, chain.gb) == 0);
            }
    }
}

TEST_CASE("linear_relu_dropout: the mask drops about p of the positive outputs and scales the rest") {
  const Tensor x = sample({64, 100}, DType::f32, 21), w = sample({200, 100}, DType::f32, 22);
  const Tensor b = sample({200}, DType::f32, 23);
  manual_seed(3);
  const Tensor y = F::linear_relu_dropout(x, w, b, 0.3, true);
  const std::vector<float> got = y.to_vector<float>();
  const std::vector<float> plain = relu(linear(x, w, b)).to_vector<float>();
  int64_t positive = 0, dropped = 0, wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (plain[i] <= 0) {
      wrong += got[i] != 0;
      continue;
    }
    ++positive;
    if (got[i] == 0) ++dropped;
    else wrong += std::abs(got[i] - plain[i] / 0.7f) > 1e-5f * (1 + plain[i]);
  }
  CHECK(wrong == 0);
  REQUIRE(positive > 2000);
  const double frac = double(dropped) / double(positive);
  CHECK(frac > 0.26);
  CHECK(frac < 0.34);
  // A fresh draw each call: the next call's mask differs.
  CHECK(bits_differ(F::linear_relu_dropout(x, w, b, 0.3, true), y) > 0);
}

TEST_CASE("linear_relu_dropout: f64 gradcheck of x, weight and bias with a fixed mask") {
  for (double p : {0.0, 0.4}) {
    auto f = [p](const std::vector<Tensor>& in) {
      set_rng_state({5, 100});  // every evaluation draws the same mask
      return F::linear_relu_dropout(in[0], in[1], in[2], p, true);
    };
    const Tensor x = sample({6, 7}, DType::f64, 31), w = sample({5, 7}, DType::f64, 32);
    const Tensor b = sample({5}, DType::f64, 33);
    const autograd::GradcheckResult res = autograd::gradcheck(f, {x, w, b});
    INFO("p=" << p << " " << res.message);
    CHECK(res.ok);
  }
}

TEST_CASE("linear_relu_dropout: no history without grad, in-place writes refused, bad arguments named") {
  const Tensor x = sample({4, 3}, DType::f32, 41), w = sample({2, 3}, DType::f32, 42).requires_grad_();
  {
    NoGradGuard guard;
    CHECK_FALSE(F::linear_relu_dropout(x, w, Tensor(), 0.2, true).requires_grad());
  }
  Tensor y = F::linear_relu_dropout(x, w, Tensor(), 0.2, true);
  CHECK(y.requires_grad());
  // The fused op ran (not the chain): its own backward node.
  REQUIRE(y.impl()->grad_fn != nullptr);
  CHECK(y.impl()->grad_fn->name() == "linear_relu_dropout_backward");
  y.mul_(2.0);
  CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("in-place"), Error);
  CHECK_THROWS_WITH_AS(F::linear_relu_dropout(x, w, Tensor(), 1.5, true), doctest::Contains("linear_relu_dropout"),
                       Error);
  CHECK_THROWS_WITH_AS(F::linear_relu_dropout(x, sample({2, 4}, DType::f32, 43), Tensor(), 0.2, true),
                       doctest::Contains("linear"), Error);
  // Other dtypes run the chain (which names its own op).
  CHECK_THROWS_AS(F::linear_relu_dropout(x.to(DType::i32), w, Tensor(), 0.2, true), Error);
}

TEST_CASE("Sequential (MLP) runs Linear -> ReLU -> Dropout fused in eager mode: each layer's bits and gradients") {
  manual_seed(9);
  auto net = std::make_shared<nn::MLP>(20, std::vector<int64_t>{30, 25, 7}, /*bias=*/true, /*dropout=*/0.2);
  const Tensor x = sample({13, 20}, DType::f32, 51), r = sample({13, 7}, DType::f32, 52);
  for (bool training : {true, false}) {
    if (training) net->train();
    else net->eval();
    std::vector<Tensor> grads[2];
    Tensor out[2];
    for (int layered = 0; layered < 2; ++layered) {
      net->zero_grad();
      set_rng_state({31, 0});
      Tensor y = x;
      if (layered)
        for (const auto& [name, layer] : net->named_children()) y = layer->forward(y);
      else
        y = net->forward(x);
      sum(mul(y, r)).backward();
      out[layered] = y.detach();
      for (const Tensor& p : net->parameters()) grads[layered].push_back(p.grad());
    }
    INFO("training=" << training);
    CHECK(bits_differ(out[0], out[1]) == 0);
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(bits_differ(grads[0][i], grads[1][i]) == 0);
  }
  // The fused op is what ran: a two-layer Sequential's output has its node.
  nn::Sequential seq;
  seq.push_back(std::make_shared<nn::Linear>(4, 3));
  seq.push_back(std::make_shared<nn::ReLU>());
  seq.push_back(std::make_shared<nn::Dropout>(0.5));
  const Tensor y = seq.forward(sample({2, 4}, DType::f32, 53));
  REQUIRE(y.impl()->grad_fn != nullptr);
  CHECK(y.impl()->grad_fn->name() == "linear_relu_dropout_backward");
}

TEST_CASE("linear_relu_dropout under eager autocast: the chain's ops in bf16, as each layer alone runs") {
  manual_seed(10);
  auto net = std::make_shared<nn::MLP>(20, std::vector<int64_t>{30, 25, 7}, /*bias=*/true, /*dropout=*/0.2);
  net->train();
  const Tensor x = sample({13, 20}, DType::f32, 54);
  std::vector<Tensor> grads[2];
  Tensor out[2];
  for (int layered = 0; layered < 2; ++layered) {
    net->zero_grad();
    set_rng_state({32, 0});
    Tensor y;
    {
      AutocastGuard amp(DType::bf16);
      y = x;
      if (layered)
        for (const auto& [name, layer] : net->named_children()) y = layer->forward(y);
      else
        y = net->forward(x);
    }
    sum(y.to(DType::f32)).backward();
    out[layered] = y.detach();
    for (const Tensor& p : net->parameters()) grads[layered].push_back(p.grad());
  }
  // The linears ran in bf16 (the result's type), and the fused call gave what
  // the layers one by one give; the parameters' gradients stay f32.
  CHECK(out[0].dtype() == DType::bf16);
  CHECK(bits_differ(out[0].to(DType::f32), out[1].to(DType::f32)) == 0);
  const Tensor h = F::linear_relu_dropout(x, net->parameters()[0], net->parameters()[1], 0.0, false);
  CHECK(h.dtype() == DType::f32);
  {
    AutocastGuard amp(DType::bf16);
    CHECK(F::linear_relu_dropout(x, net->parameters()[0], net->parameters()[1], 0.0, false).dtype() == DType::bf16);
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    CHECK(grads[0][i].dtype() == DType::f32);
    CHECK(bits_differ(grads[0][i], grads[1][i]) == 0);
  }
}

TEST_CASE("linear_relu_dropout under bf16 autocast: ReLU and dropout in one pass on the bf16 product, bit for bit") {
  Restore restore;
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  const std::vector<Case> cases = {{{8, 784}, 784, true}, {{70, 450}, 45, true}, {{2, 5, 17}, 9, false}};
  auto f32 = [](const Tensor& t) { return t.defined() ? t.to(DType::f32) : t; };  // bf16 widens exactly
  for (const Case& cs : cases) {
    Shape ys = cs.x;
    ys.back() = cs.out;
    const Tensor x = sample(cs.x, DType::f32, 61), w = sample({cs.out, cs.x.back()}, DType::f32, 62);
    const Tensor b = cs.bias ? sample({cs.out}, DType::f32, 63) : Tensor(), r = sample(ys, DType::f32, 64);
    for (double p : {0.0, 0.1, 0.5, 1.0})
      for (bool training : {true, false})
        for (int threads : {1, 3}) {
          if (!training && p != 0.5) continue;
          INFO(shape_str(cs.x) << " -> " << cs.out << " p=" << p << " training=" << training << " threads=" << threads);
          cpu::set_num_threads(threads);
          Run fused, chain;
          {
            AutocastGuard amp(DType::bf16);
            fused = run(true, x, w, b, r, p, training);
            chain = run(false, x, w, b, r, p, training);
          }
          REQUIRE(fused.y.dtype() == DType::bf16);
          CHECK(fused.after.offset == chain.after.offset);
          CHECK(bits_differ(f32(fused.y), f32(chain.y)) == 0);
          CHECK(bits_differ(fused.gx, chain.gx) == 0);
          CHECK(bits_differ(fused.gw, chain.gw) == 0);
          if (cs.bias) CHECK(bits_differ(fused.gb, chain.gb) == 0);
        }
  }
  // The one pass is what ran (its node), not the chain.
  Tensor xg = sample({4, 6}, DType::f32, 65).requires_grad_();
  AutocastGuard amp(DType::bf16);
  const Tensor y = F::linear_relu_dropout(xg, sample({3, 6}, DType::f32, 66), Tensor(), 0.3, true);
  REQUIRE(y.impl()->grad_fn != nullptr);
  CHECK(y.impl()->grad_fn->name() == "relu_dropout_backward");
}

TEST_CASE("cpu_relu_dropout_bf16: relu then dropout on bf16 values, rounded once; bad operands named") {
  // p = 0: relu alone, exact on bf16 values (a NaN stays NaN).
  const Tensor z = Tensor::from_vector(std::vector<float>{-1.5f, 2.0f, 0.0f, 3.25f}, {4}).to(DType::bf16);
  Tensor out = Tensor::empty({4}, DType::bf16);
  cpu_relu_dropout_bf16(z, 0.0, PhiloxState{}, out);
  CHECK(out.to(DType::f32).to_vector<float>() == std::vector<float>{0.0f, 2.0f, 0.0f, 3.25f});
  // p = 0.5 with the draws of the chain: each kept element doubled, the rest 0.
  set_rng_state({5, 0});
  const Tensor u = Tensor::rand({4});  // the draws the chain compares with 1 - p
  cpu_relu_dropout_bf16(z, 0.5, PhiloxState{5, 0}, out);
  const std::vector<float> uv = u.to_vector<float>(), got = out.to(DType::f32).to_vector<float>();
  const std::vector<float> relu_z{0.0f, 2.0f, 0.0f, 3.25f};
  for (size_t i = 0; i < 4; ++i) CHECK(got[i] == (uv[i] < 0.5f ? relu_z[i] * 2.0f : 0.0f));
  Tensor small = Tensor::empty({3}, DType::bf16);
  CHECK_THROWS_WITH_AS(cpu_relu_dropout_bf16(z, 0.5, PhiloxState{}, small), doctest::Contains("relu_dropout"), Error);
  CHECK_THROWS_WITH_AS(cpu_relu_dropout_bf16(z.to(DType::f32), 0.5, PhiloxState{}, out),
                       doctest::Contains("relu_dropout"), Error);
}

TEST_CASE("cpu_relu_dropout_backward: the gradient where the output is positive, scaled; bad operands named") {
  const Tensor y = Tensor::from_vector(std::vector<float>{0.0f, 2.0f, -0.0f, 3.0f}, {4});
  const Tensor g = Tensor::from_vector(std::vector<float>{5.0f, 7.0f, 11.0f, -13.0f}, {4});
  Tensor out = Tensor::empty({4});
  cpu_relu_dropout_backward(y, g, 0.5, out);
  CHECK(out.to_vector<float>() == std::vector<float>{0.0f, 14.0f, 0.0f, -26.0f});
  cpu_relu_dropout_backward(y, g, 0.0, out);
  CHECK(out.to_vector<float>() == std::vector<float>{0.0f, 7.0f, 0.0f, -13.0f});
  Tensor small = Tensor::empty({3});
  CHECK_THROWS_WITH_AS(cpu_relu_dropout_backward(y, g, 0.5, small), doctest::Contains("relu_dropout_backward"),
                       Error);
  CHECK_THROWS_WITH_AS(cpu_relu_dropout_backward(y, g.to(DType::f64), 0.5, out),
                       doctest::Contains("relu_dropout_backward"), Error);
}
