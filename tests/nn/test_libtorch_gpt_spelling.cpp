// The LibTorch spellings a GPT program uses (tests/port/libtorch/gpt.cpp):
// Embedding, LayerNorm and ModuleList made empty from nullptr and assigned,
// block->as<Block>(), the LayerNormOptions, LinearOptions and AdamWOptions
// builders, parameters as public fields (wte->weight), and nn::init.  Each is
// checked against what it must compute: PyTorch's layer-norm formula, AdamW's
// documented update worked out by hand, the moments of the drawn values.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/nn/adamw.h>
#include <volt/nn/container.h>
#include <volt/nn/embedding.h>
#include <volt/nn/functional.h>
#include <volt/nn/init.h>
#include <volt/nn/layer_norm.h>
#include <volt/nn/linear.h>
#include <volt/nn/module.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "error_of.h"

using namespace volt;

namespace gpt_spelling {
struct Block : nn::Module {
  Block() { ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({4}).eps(1e-3))); }
  Tensor forward(const Tensor& x) override { return ln->forward(x) * 2.0; }
  nn::LayerNorm ln{nullptr};
};
struct Net : nn::Module {
  Net() {
    wte = register_module("wte", nn::Embedding(10, 4));
    h = register_module("h", nn::ModuleList());
    for (int i = 0; i < 2; ++i) h->push_back(std::make_shared<Block>());
  }
  Tensor forward(const Tensor& idx) override {
    Tensor x = wte->forward(idx);
    for (const auto& block : *h) x = block->as<Block>()->forward(x);
    return nn::functional::linear(x, wte->weight);  // tied output projection
  }
  nn::Embedding wte{nullptr};
  nn::ModuleList h{nullptr};
};
}  // namespace gpt_spelling

TEST_CASE("Embedding, LayerNorm and ModuleList stand for their registered modules; as<M>() finds a block") {
  manual_seed(0);
  gpt_spelling::Net net;
  CHECK(net.wte->weight.is_same(net.named_parameters()[0].value()));
  CHECK(net.wte->weight().is_same(net.wte->weight));
  CHECK(net.h->size() == 2);
  CHECK(net.h->at<gpt_spelling::Block>(1)->ln->weight.sizes() == Shape{4});
  // Names as LibTorch's: wte.weight, h.0.ln.weight, h.0.ln.bias, h.1.ln.weight, h.1.ln.bias.
  std::vector<std::string> names;
  for (const auto& p : net.named_parameters()) names.push_back(p.key());
  CHECK(names == std::vector<std::string>{"wte.weight", "h.0.ln.weight", "h.0.ln.bias", "h.1.ln.weight", "h.1.ln.bias"});
  CHECK((*net.h)[0]->as<gpt_spelling::Block>() != nullptr);
  CHECK((*net.h)[0]->as<nn::Linear>() == nullptr);
  // The forward against the formula: LayerNorm with eps 1e-3 (the options' eps
  // reaches the layer) on each row, times 2, twice; then rows times wte^T.
  Tensor idx = Tensor::from_vector<int64_t>({3, 7}, {1, 2});
  Tensor table = net.wte->weight.to(DType::f64);
  Tensor x = stack({table.select(0, 3), table.select(0, 7)});
  for (int i = 0; i < 2; ++i) {
    Tensor mu = x.mean({1}, true), var = ((x - mu) * (x - mu)).mean({1}, true);
    x = (x - mu) / (var + 1e-3).sqrt() * 2.0;
  }
  Tensor want = matmul(x, net.wte->weight.to(DType::f64).t());
  CHECK(net.forward(idx).view({2, 10}).to(DType::f64).allclose(want, 1e-5, 1e-5));
  nn::ModuleList empty{nullptr};
  CHECK(testing::error_of([&] { empty->size(); }).find("made from nullptr") != std::string::npos);
}

TEST_CASE("LayerNormOptions and LinearOptions build the layers they describe") {
  nn::LayerNorm plain(nn::LayerNormOptions({2, 3}).elementwise_affine(false));
  CHECK(plain.parameters().empty());
  CHECK(plain.eps() == 1e-5);
  CHECK(plain.normalized_shape() == Shape{2, 3});
  nn::Linear no_bias(nn::LinearOptions(3, 5).bias(false));
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
  CHECK(no_bias.weight.sizes() == Shape{5, 3});
  CHECK(nn::Linear(nn::LinearOptions(3, 5)).parameters().size() == 2);
}

TEST_CASE("assigning a parameter field rebinds what the layer computes with, not what it registered (as LibTorch)") {
  manual_seed(1);
  nn::Linear fc(3, 2, /*bias=*/false);
  const Tensor registered = fc.named_parameters()[0].value();
  Tensor other = ones({2, 3});
  fc.weight = other;
  CHECK(fc.weight.is_same(other));
  CHECK(fc.named_parameters()[0].value().is_same(registered));
  CHECK(fc.forward(ones({1, 3})).to_vector<float>() == std::vector<float>{3.f, 3.f});
}

TEST_CASE("optim::AdamWOptions' builder gives PyTorch's AdamW update") {
  // One parameter, two steps, gradient 2 then -1: the documented rule by hand.
  Tensor p = Tensor::from_vector<double>({1.0}).requires_grad_();
  optim::AdamW opt({p}, optim::AdamWOptions(0.1).betas({0.8, 0.9}).weight_decay(0.5).eps(1e-6));
  CHECK(optim::AdamWOptions(0.1).betas({0.8, 0.9}).betas() == std::tuple<double, double>{0.8, 0.9});
  CHECK(opt.options().weight_decay == 0.5);
  double want = 1.0, m = 0, v = 0;
  const double grads[2] = {2.0, -1.0};
  for (int t = 1; t <= 2; ++t) {
    p.set_grad(Tensor::from_vector<double>({grads[t - 1]}));
    opt.step();
    const double g = grads[t - 1];
    want *= 1 - 0.1 * 0.5;
    m = 0.8 * m + 0.2 * g;
    v = 0.9 * v + 0.1 * g * g;
    want -= 0.1 / (1 - std::pow(0.8, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.9, t)) + 1e-6);
    CHECK(p.item<double>() == doctest::Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("nn::init fills in place, outside autograd, with the asked distribution") {
  manual_seed(2);
  Tensor w = zeros({400, 250}).requires_grad_();
  Tensor same = nn::init::normal_(w, 0.5, 0.02);
  CHECK(same.is_same(w));
  CHECK(w.is_leaf());
  // 100000 draws: the mean within 4 standard errors (0.02 / sqrt(1e5) * 4), the std within 1%.
  const double mean = w.to(DType::f64).mean().item<double>();
  const double std = (w.to(DType::f64) - mean).pow(2).mean().sqrt().item<double>();
  CHECK(std::abs(mean - 0.5) < 0.02 / std::sqrt(1e5) * 4);
  CHECK(std::abs(std - 0.02) < 0.0002);
  nn::init::uniform_(w, -2.0, -1.0);
  CHECK(w.min().item<float>() >= -2.f);
  CHECK(w.max().item<float>() < -1.f);
  CHECK(std::abs(w.to(DType::f64).mean().item<double>() + 1.5) < 0.01);
  nn::init::zeros_(w);
  CHECK(w.abs().max().item<float>() == 0.f);
  nn::init::ones_(w);
  CHECK(w.min().item<float>() == 1.f);
  nn::init::constant_(w, 0.25);
  CHECK(w.max().item<float>() == 0.25f);
  CHECK(testing::error_of([] { nn::init::normal_(zeros({2}, DType::i64)); }).find("nn::init::normal_") !=
        std::string::npos);
  CHECK(testing::error_of([] { nn::init::normal_(zeros({2}), 0.0, -1.0); }).find("std must be") != std::string::npos);
}
