// The GPT baseline of `libtorch_bench --model gpt`: nanoGPT's layout in
// LibTorch's C++ frontend, with the recipe of volt's examples/gpt (byte-level,
// vocabulary 256, block 128, 4 layers of 4 heads at width 128, dropout 0;
// AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on 2-D weights only,
// 100 warm-up steps then cosine to 1e-4, gradients clipped at norm 1.0).
//
// Timed: training steps on random windows (tokens/s = batch x block / step).
// With --text FILE and --train-steps N it trains for N steps on the file's
// first 90 % and prints the validation loss (the mean over 20 fixed windows
// batches of the last 10 %) every --eval-every steps, as the example does.
#include "libtorch_gpt.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common.h"

namespace gpt {

namespace {

namespace nn = torch::nn;

struct AttentionImpl : nn::Module {
  AttentionImpl(const Config& c) : heads(c.heads) {
    c_attn = register_module("c_attn", nn::Linear(c.width, 3 * c.width));
    c_proj = register_module("c_proj", nn::Linear(c.width, c.width));
    mask = register_buffer("bias", torch::ones({c.block, c.block}).tril().view({1, 1, c.block, c.block}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / heads;
    auto qkv = c_attn(x).split(C, 2);
    auto q = qkv[0].view({B, T, heads, hs}).transpose(1, 2);
    auto k = qkv[1].view({B, T, heads, hs}).transpose(1, 2);
    auto v = qkv[2].view({B, T, heads, hs}).transpose(1, 2);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hs)));
    att = att.masked_fill(mask.slice(2, 0, T).slice(3, 0, T) == 0, -INFINITY).softmax(-1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
    return c_proj(y);
  }
  int64_t heads;
  nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::Tensor mask;
};
TORCH_MODULE(Attention);

struct BlockImpl : nn::Module {
  BlockImpl(const Config& c) {
    ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    attn = register_module("attn", Attention(c));
    ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    c_fc = register_module("c_fc", nn::Linear(c.width, 4 * c.width));
    c_proj = register_module("c_proj", nn::Linear(4 * c.width, c.width));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + c_proj(torch::gelu(c_fc(ln_2(x))));
  }
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : nn::Module {
  GptImpl(const Config& c) {
    wte = register_module("wte", nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", nn::Embedding(c.block, c.width));
    for (int64_t i = 0; i < c.layers; ++i) h.push_back(register_module("h" + std::to_string(i), Block(c)));
    ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    // GPT-2's initialisation; lm_head shares wte's weight (no parameter of its own).
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const std::string& n = p.key();
      if (n.find(".bias") != std::string::npos && n.find("ln_") == std::string::npos) p.value().zero_();
      else if (p.value().dim() == 2) p.value().normal_(0.0, 0.02);
      if (n.find("c_proj.weight") != std::string::npos) p.value().normal_(0.0, 0.02 / std::sqrt(2.0 * c.layers));
    }
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    const int64_t T = idx.size(1);
    auto x = wte(idx) + wpe(torch::arange(T, torch::kLong));
    for (auto& b : h) x = b(x);
    return torch::matmul(ln_f(x), wte->weight.t());
  }
  nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> h;
  nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

// nanoGPT's get_lr: linear warm-up, cosine to min_lr, then min_lr.
double lr_at(int64_t step, const Config& c) {
  if (step < c.warmup) return c.lr * double(step + 1) / double(c.warmup);
  if (step >= c.decay_steps) return c.min_lr;
  const double t = double(step - c.warmup) / double(c.decay_steps - c.warmup);
  return c.min_lr + 0.5 * (1.0 + std::cos(M_PI * t)) * (c.lr - c.min_lr);
}

// Random windows of `block` bytes from [begin, end) of the text, and the same shifted by one.
std::pair<torch::Tensor, torch::Tensor> windows(const std::string& text, size_t begin, size_t end, const Config& c,
                                                std::mt19937_64& rng) {
  if (end - begin < size_t(c.block) + 1) throw std::runtime_error("libtorch_bench: the text is shorter than a window");
  std::uniform_int_distribution<size_t> pick(begin, end - size_t(c.block) - 1);
  auto x = torch::empty({c.batch, c.block}, torch::kLong), y = torch::empty({c.batch, c.block}, torch::kLong);
  auto xa = x.accessor<int64_t, 2>(), ya = y.accessor<int64_t, 2>();
  for (int64_t b = 0; b < c.batch; ++b) {
    const size_t s = pick(rng);
    for (int64_t t = 0; t < c.block; ++t) {
      xa[b][t] = static_cast<unsigned char>(text[s + t]);
      ya[b][t] = static_cast<unsigned char>(text[s + t + 1]);
    }
  }
  return {x, y};
}

}  // namespace

Trainer::Trainer(const Config& c) : c_(c) {
  torch::manual_seed(c.seed);
  auto model = Gpt(c);
  module_ = model.ptr();
  forward_ = [model](const torch::Tensor& x) mutable { return model->forward(x); };
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : module_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(c.lr).betas({0.9, 0.95}).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(c.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  opt_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
}

double Trainer::step(const torch::Tensor& x, const torch::Tensor& y) {
  const double lr = lr_at(step_++, c_);
  for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  torch::Tensor loss;
  {
    CpuAutocast amp(c_.amp_bf16);  // forward and loss; backward outside, as PyTorch advises
    auto logits = forward_(x);
    loss = torch::nn::functional::cross_entropy(logits.view({-1, c_.vocab}), y.view({-1}));
  }
  opt_->zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(module_->parameters(), 1.0);
  opt_->step();
  return loss.item<double>();
}

double Trainer::val_loss(const std::string& text, size_t begin, size_t end) {
  torch::NoGradGuard no_grad;
  std::mt19937_64 rng(1234);  // the same 20 batches every time
  double sum = 0;
  for (int i = 0; i < 20; ++i) {
    auto [x, y] = windows(text, begin, end, c_, rng);
    sum += torch::nn::functional::cross_entropy(forward_(x).view({-1, c_.vocab}), y.view({-1})).item<double>();
  }
  return sum / 20;
}

int run(const Config& c, bool json, int64_t timed_steps, const std::string& text_path, int64_t train_steps,
        int64_t eval_every) {
  Trainer t(c);
  if (!text_path.empty()) {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) throw std::runtime_error("libtorch_bench: cannot read " + text_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const size_t split = text.size() * 9 / 10;
    std::mt19937_64 rng(c.seed);
    std::printf("step 0 val loss %.4f\n", t.val_loss(text, split, text.size()));
    const auto t0 = bench::Clock::now();
    for (int64_t s = 1; s <= train_steps; ++s) {
      auto [x, y] = windows(text, 0, split, c, rng);
      t.step(x, y);
      if (s % eval_every == 0 || s == train_steps) {
        const double secs = bench::us_since(t0) / 1e6;
        std::printf("step %lld val loss %.4f, %.0f tokens/s\n", (long long)s, t.val_loss(text, split, text.size()),
                    double(s) * double(c.batch * c.block) / secs);
        std::fflush(stdout);
      }
    }
    return 0;
  }
  std::string random_text(size_t(c.block) * 64, ' ');
  std::mt19937_64 rng(c.seed);
  for (char& ch : random_text) ch = static_cast<char>(32 + rng() % 95);
  auto [x, y] = windows(random_text, 0, random_text.size(), c, rng);
  auto step = [&] { t.step(x, y); };
  step();
  const bench::Timing timing = bench::time_steps(step, timed_steps);
  const double tokens = 1e6 / timing.median_us * double(c.batch * c.block);
  if (json)
    std::printf("{\"model\":\"gpt\",\"mode\":\"%s\",\"device\":\"cpu\",\"phase\":\"train\",\"batch\":%lld,"
                "\"steps\":%lld,\"median_us\":%.2f,\"min_us\":%.2f,\"steps_per_s\":%.2f,\"tokens_per_s\":%.1f}\n",
                c.amp_bf16 ? "libtorch+bf16" : "libtorch", (long long)c.batch, (long long)timing.steps,
                timing.median_us, timing.min_us, 1e6 / timing.median_us, tokens);
  else
    std::printf("libtorch cpu gpt batch %lld x %lld: median %.1f us, %.0f tokens/s\n", (long long)c.batch,
                (long long)c.block, timing.median_us, tokens);
  return 0;
}

}  // namespace gpt
