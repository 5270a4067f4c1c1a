// The GPT and its layers: nanoGPT's parameter names, the tied output
// projection, GPT-2's init, attention against a loop-by-loop reference,
// causality, generation and the errors for bad configurations and inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <volt/nn/container.h>
#include <volt/nn/gpt.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tensor/reference.h"

using namespace volt;
using volt::testing::max_abs_diff;

namespace {

// The small GPT the tests train: 2 layers of width 32, 2 heads, block 16, vocab 64.
nn::GPTConfig tiny() { return {.block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32}; }

std::shared_ptr<nn::GPT> make_gpt(uint64_t seed = 3) {
  manual_seed(seed);
  return std::make_shared<nn::GPT>(tiny());
}

double std_of(const Tensor& t) {
  auto v = t.to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / v.size());
}

}  // namespace

TEST_CASE("GPT: nanoGPT's parameter names, in its order, and its parameter count") {
  auto gpt = make_gpt();
  std::vector<std::string> names;
  for (auto& [n, p] : gpt->named_parameters()) names.push_back(n);
  std::vector<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      want.push_back(b + s);
  }
  want.push_back("transformer.ln_f.weight");
  want.push_back("transformer.ln_f.bias");
  CHECK(names == want);
  // V C + T C + L (12 C^2 + 13 C) + 2 C, the output projection counted once (it is wte).
  const int64_t V = 64, T = 16, L = 2, C = 32;
  CHECK(gpt->num_parameters() == V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C);
  CHECK(gpt->num_parameters_non_embedding() == gpt->num_parameters() - T * C);
  CHECK(gpt->named_parameters().at(4).second.sizes() == Shape{3 * C, C});
}

TEST_CASE("GPT: lm_head is transformer.wte, one tensor under two names in state_dict and the saved file") {
  auto gpt = make_gpt();
  auto sd = gpt->state_dict();
  Tensor wte, head;
  for (auto& [n, t] : sd) {
    if (n == "transformer.wte.weight") wte = t;
    if (n == "lm_head.weight") head = t;
  }
  REQUIRE(wte.defined());
  REQUIRE(head.defined());
  CHECK(wte.is_same(head));
  CHECK(sd.size() == gpt->named_parameters().size() + 1);
  // The gradient of both uses lands in the one tensor.
  Tensor idx = Tensor::randint(0, 64, {2, 8});
  gpt->forward(idx, idx).loss.backward();
  CHECK(wte.grad().defined());
  // Saved under both names; loading writes the same tensor twice, consistently.
  auto path = (std::filesystem::temp_directory_path() / ("volt_test_gpt_" + std::to_string(::getpid()) + ".safetensors")).string();
  nn::save(*gpt, path);
  std::set<std::string> file_names;
  for (auto& [n, t] : nn::load_tensors(path)) file_names.insert(n);
  CHECK(file_names.count("lm_head.weight") == 1);
  CHECK(file_names.count("transformer.wte.weight") == 1);
  auto other = make_gpt(11);
  CHECK(max_abs_diff(other->named_parameters()[0].second, wte) > 0);
  nn::load(*other, path);
  for (size_t i = 0; i < sd.size(); ++i) CHECK(max_abs_diff(other->state_dict()[i].second, sd[i].second) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("GPT: GPT-2's init (N(0, 0.02), c_proj scaled by 1/sqrt(2 n_layer), zero biases, unit gains)") {
  manual_seed(0);
  nn::GPT gpt({.block_size = 64, .vocab_size = 256, .n_layer = 2, .n_head = 2, .n_embd = 64});
  for (auto& [n, p] : gpt.named_parameters()) {
    CAPTURE(n);
    if (n.find("c_proj.weight") != std::string::npos) {
      CHECK(std::fabs(std_of(p) - 0.02 / std::sqrt(4.0)) < 0.0015);
    } else if (p.dim() == 2) {
      CHECK(std::fabs(std_of(p) - 0.02) < 0.0015);
    } else if (n.find("ln_") != std::string::npos && n.find("weight") != std::string::npos) {
      CHECK(max_abs_diff(p, Tensor::ones(p.sizes())) == 0);
    } else {
      CHECK(max_abs_diff(p, Tensor::zeros(p.sizes())) == 0);
    }
  }
}

TEST_CASE("GPT: the printed model reads like nanoGPT's") {
  auto gpt = make_gpt();
  std::ostringstream os;
  os << *gpt;
  const std::string s = os.str();
  CHECK(s.rfind("GPT(\n  (transformer): ModuleDict(\n    (wte): Embedding(64, 32)\n    (wpe): Embedding(16, 32)\n", 0) == 0);
  CHECK(s.find("(ln_1): LayerNorm((32,), eps=1e-05, elementwise_affine=True)") != std::string::npos);
  CHECK(s.find("(c_attn): Linear(in_features=32, out_features=96, bias=True)") != std::string::npos);
  CHECK(s.find("(gelu): GELU(approximate='none')") != std::string::npos);
  CHECK(s.find("(lm_head): Linear(in_features=32, out_features=64, bias=False)") != std::string::npos);
  auto modules = gpt->named_modules();
  CHECK(modules[0].first.empty());
  CHECK(modules[0].second.get() == gpt.get());
  CHECK(modules[1].first == "transformer");
  bool found = false;
  for (auto& [n, m] : modules) found = found || (n == "transformer.h.1.attn.c_attn" && m->type_name() == "Linear");
  CHECK(found);
  CHECK(modules.size() == 1 + 1 + 3 + 1 + 2 * (1 + 1 + 5 + 1 + 5) + 1 + 1);
}

TEST_CASE("CausalSelfAttention equals a loop-by-loop attention in f64") {
  manual_seed(5);
  const int64_t B = 2, T = 5, C = 8, nh = 2, hs = 4;
  nn::CausalSelfAttention attn({.block_size = 8, .vocab_size = 10, .n_layer = 1, .n_head = nh, .n_embd = C});
  Tensor x = Tensor::randn({B, T, C});
  Tensor got = attn(x);
  auto P = attn.named_parameters();  // c_attn.weight (3C, C), c_attn.bias, c_proj.weight (C, C), c_proj.bias
  auto wa = P[0].second.to_vector<double>(), ba = P[1].second.to_vector<double>();
  auto wp = P[2].second.to_vector<double>(), bp = P[3].second.to_vector<double>();
  auto xv = x.to_vector<double>();
  std::vector<double> want(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> qkv(T * 3 * C), y(T * C, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < 3 * C; ++o) {
        double s = ba[o];
        for (int64_t i = 0; i < C; ++i) s += xv[(b * T + t) * C + i] * wa[o * C + i];
        qkv[t * 3 * C + o] = s;
      }
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(t + 1);
        double top = -1e300, total = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hs; ++d) s += qkv[t * 3 * C + h * hs + d] * qkv[j * 3 * C + C + h * hs + d];
          w[j] = s / std::sqrt(double(hs));
          top = std::max(top, w[j]);
        }
        for (double& v : w) total += v = std::exp(v - top);
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hs; ++d) y[t * C + h * hs + d] += w[j] / total * qkv[j * 3 * C + 2 * C + h * hs + d];
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < C; ++o) {
        double s = bp[o];
        for (int64_t i = 0; i < C; ++i) s += y[t * C + i] * wp[o * C + i];
        want[(b * T + t) * C + o] = s;
      }
  }
  CHECK(max_abs_diff(got, Tensor::from_vector(want, {B, T, C}).to(DType::f32)) < 1e-5);
}

TEST_CASE("GPT: a later token does not change earlier logits; the loss is cross-entropy of the logits") {
  auto gpt = make_gpt();
  Tensor idx = Tensor::randint(0, 64, {2, 12});
  auto tokens = idx.to_vector<int64_t>();
  tokens[7] = (tokens[7] + 1) % 64;  // row 0, position 7
  Tensor changed = Tensor::from_vector(tokens, {2, 12});
  Tensor a = gpt->forward(idx), b = gpt->forward(changed);
  CHECK(max_abs_diff(a.narrow(1, 0, 7), b.narrow(1, 0, 7)) < 1e-6);
  CHECK(max_abs_diff(a[0].narrow(0, 7, 5), b[0].narrow(0, 7, 5)) > 1e-4);
  CHECK(max_abs_diff(a[1], b[1]) < 1e-6);
  // The loss is the mean over positions of -log softmax(logits)[target], by hand.
  Tensor targets = Tensor::randint(0, 64, {2, 12});
  auto [logits, loss] = gpt->forward(idx, targets);
  auto l = logits.to_vector<double>();
  auto tg = targets.to_vector<int64_t>();
  double want = 0;
  for (int64_t r = 0; r < 24; ++r) {
    double top = -1e300, total = 0;
    for (int64_t v = 0; v < 64; ++v) top = std::max(top, l[r * 64 + v]);
    for (int64_t v = 0; v < 64; ++v) total += std::exp(l[r * 64 + v] - top);
    want += top + std::log(total) - l[r * 64 + tg[r]];
  }
  CHECK(std::fabs(loss.item<double>() - want / 24) < 1e-5);
}

TEST_CASE("GPT::generate: the same seed gives the same tokens; top_k = 1 is greedy") {
  auto gpt = make_gpt();
  gpt->eval();
  Tensor prompt = Tensor::randint(0, 64, {2, 3});
  Tensor a = gpt->generate(prompt, 20, {.temperature = 1.0, .top_k = 0, .seed = 7});
  Tensor b = gpt->generate(prompt, 20, {.temperature = 1.0, .top_k = 0, .seed = 7});
  Tensor c = gpt->generate(prompt, 20, {.temperature = 1.0, .top_k = 0, .seed = 8});
  CHECK(a.sizes() == Shape{2, 23});
  CHECK(equal(a, b));
  CHECK(!equal(a, c));
  CHECK(equal(a.narrow(1, 0, 3), prompt));
  for (int64_t t : a.to_vector<int64_t>()) CHECK((t >= 0 && t < 64));
  // Greedy, past the block (16): each next token is the argmax given the last 16 tokens.
  Tensor g = gpt->generate(prompt, 18, {.temperature = 0.5, .top_k = 1, .seed = 99});
  Tensor seq = prompt;
  for (int i = 0; i < 18; ++i) {
    const int64_t T = seq.size(1), keep = std::min<int64_t>(T, 16);
    Tensor last = gpt->forward(seq.narrow(1, T - keep, keep)).select(1, keep - 1);  // (2, 64)
    seq = cat({seq, argmax(last, 1).reshape({2, 1})}, 1);
  }
  CHECK(equal(g, seq));
}

TEST_CASE("GPT: bad configurations and inputs are errors naming the module") {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([] { nn::CausalSelfAttention({.n_head = 3, .n_embd = 32}); });
  CHECK(m.find("CausalSelfAttention") != std::string::npos);
  CHECK(m.find("not divisible") != std::string::npos);
  CHECK(message([] { nn::GPT({.n_head = 5, .n_embd = 32}); }).find("GPT") != std::string::npos);
  auto gpt = make_gpt();
  m = message([&] { gpt->forward(Tensor::randint(0, 64, {1, 17})); });
  CHECK(m.find("longer than the position table (block_size=16)") != std::string::npos);
  CHECK(message([&] { gpt->forward(Tensor::randint(0, 64, {17})); }).find("(B, T)") != std::string::npos);
  CHECK(message([&] { gpt->generate(Tensor::randint(0, 64, {1, 2}), 3, {.temperature = 0}); })
            .find("temperature") != std::string::npos);
  CHECK(message([] { nn::GELU("fast"); }).find("GELU") != std::string::npos);
  nn::ModuleList list;
  CHECK(message([&] { list[0]; }).find("ModuleList") != std::string::npos);
  nn::ModuleDict dict;
  CHECK(message([&] { dict["x"]; }).find("no module named 'x'") != std::string::npos);
}

TEST_CASE("Embedding, LayerNorm, GELU and Softmax modules: printed forms and values") {
  manual_seed(1);
  nn::Embedding emb(10, 4);
  CHECK(emb.repr() == "Embedding(10, 4)");
  Tensor idx = Tensor::from_vector<int64_t>({3, 0, 3}, {3});
  Tensor rows = emb(idx);
  CHECK(max_abs_diff(rows[0], emb.weight()[3]) == 0);
  CHECK(max_abs_diff(rows[1], emb.weight()[0]) == 0);
  CHECK(std::fabs(std_of(emb.weight()) - 1.0) < 0.4);  // N(0, 1), as PyTorch
  nn::LayerNorm ln(4);
  CHECK(ln.repr() == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4});
  // mean 2.5, biased variance 1.25
  auto y = ln(x).to_vector<double>();
  CHECK(std::fabs(y[0] - (1 - 2.5) / std::sqrt(1.25 + 1e-5)) < 1e-5);
  CHECK(nn::LayerNorm(Shape{2, 3}, 1e-6, false).repr() == "LayerNorm((2, 3), eps=1e-06, elementwise_affine=False)");
  nn::GELU gelu, tanh_gelu("tanh");
  CHECK(tanh_gelu.repr() == "GELU(approximate='tanh')");
  auto g = gelu(x).to_vector<double>();
  CHECK(std::fabs(g[0] - 0.5 * (1 + std::erf(1 / std::sqrt(2.0)))) < 1e-6);
  auto gt = tanh_gelu(x).to_vector<double>();
  CHECK(std::fabs(gt[0] - 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (1 + 0.044715)))) < 1e-6);
  nn::Softmax sm(-1);
  CHECK(sm.repr() == "Softmax(dim=-1)");
  auto s = sm(x).to_vector<double>();
  const double total = std::exp(1) + std::exp(2) + std::exp(3) + std::exp(4);
  CHECK(std::fabs(s[3] - std::exp(4) / total) < 1e-6);
}
