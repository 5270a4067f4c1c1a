#include <volt/nn/gpt.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

namespace {

void check_config(const GPTConfig& c, const char* who) {
  VOLT_CHECK(c.n_embd > 0 && c.n_head > 0, who,
             "n_embd and n_head must be positive, got n_embd=" << c.n_embd << ", n_head=" << c.n_head);
  VOLT_CHECK(c.n_embd % c.n_head == 0, who,
             "the width n_embd=" << c.n_embd << " is not divisible by the number of heads n_head=" << c.n_head);
  VOLT_CHECK(c.block_size > 0 && c.vocab_size > 0 && c.n_layer >= 0, who,
             "block_size and vocab_size must be positive and n_layer >= 0, got block_size="
                 << c.block_size << ", vocab_size=" << c.vocab_size << ", n_layer=" << c.n_layer);
}

// Overwrites p in place with N(0, std) from the global generator.
void normal_(Tensor p, double std) {
  NoGradGuard no_grad;
  p.copy_(Tensor::randn(p.sizes(), p.dtype(), p.device()) * std);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

// ---------------------------------------------------------------- attention

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : Module("CausalSelfAttention"), n_head_(config.n_head), n_embd_(config.n_embd) {
  check_config(config, "CausalSelfAttention");
  c_attn_ = register_module("c_attn", std::make_shared<Linear>(n_embd_, 3 * n_embd_, config.bias));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(n_embd_, n_embd_, config.bias));
  attn_dropout_ = register_module("attn_dropout", std::make_shared<Dropout>(config.dropout));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(config.dropout));
}

// x: (B, T, C); q, k, v: (B, nh, T, hs) with hs = C / nh
Tensor CausalSelfAttention::forward(const Tensor& x) {
  VOLT_CHECK(x.dim() == 3 && x.size(2) == n_embd_, "CausalSelfAttention",
             "expected input (B, T, " << n_embd_ << "), got " << x.meta_str());
  const int64_t B = x.size(0), T = x.size(1), C = n_embd_, nh = n_head_, hs = C / nh;
  std::vector<Tensor> qkv = volt::split((*c_attn_)(x), C, 2);  // 3 x (B, T, C)
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, nh, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // Position i attends to j <= i only; the attention weights (B, nh, T, T)
  // exist only where the op runs decomposed (eager mode, or a jit without the
  // flash executor).
  const double p = is_training() ? attn_dropout_->p() : 0.0;
  Tensor y = volt::scaled_dot_product_attention(
      q, k, v, {.causal = true, .scale = 1.0 / std::sqrt(static_cast<double>(hs)), .dropout_p = p});  // (B, nh, T, hs)
  y = y.transpose(1, 2).reshape({B, T, C});  // heads side by side again
  return (*resid_dropout_)((*c_proj_)(y));
}

// ---------------------------------------------------------------- MLP and block

GPTMLP::GPTMLP(const GPTConfig& config) : Module("MLP") {
  c_fc_ = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  gelu_ = register_module("gelu", std::make_shared<GELU>());
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor GPTMLP::forward(const Tensor& x) { return (*dropout_)((*c_proj_)((*gelu_)((*c_fc_)(x)))); }

Block::Block(const GPTConfig& config) : Module("Block") {
  check_config(config, "Block");
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  mlp_ = register_module("mlp", std::make_shared<GPTMLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = x + (*attn_)((*ln_1_)(x));
  return h + (*mlp_)((*ln_2_)(h));
}

// ---------------------------------------------------------------- GPT

GPT::GPT(const GPTConfig& config) : Module("GPT"), config_(config) {
  check_config(config, "GPT");
  // The output projection (V, C) and the token table are one tensor.
  lm_head_ = std::make_shared<Linear>(config.n_embd, config.vocab_size, /*bias=*/false);
  transformer_ = register_module("transformer", std::make_shared<ModuleDict>());
  wte_ = std::make_shared<Embedding>(lm_head_->weight());
  wpe_ = std::make_shared<Embedding>(config.block_size, config.n_embd);
  drop_ = std::make_shared<Dropout>(config.dropout);
  h_ = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < config.n_layer; ++i) h_->push_back(std::make_shared<Block>(config));
  ln_f_ = std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias);
  transformer_->insert("wte", wte_);
  transformer_->insert("wpe", wpe_);
  transformer_->insert("drop", drop_);
  transformer_->insert("h", h_);
  transformer_->insert("ln_f", ln_f_);
  register_module("lm_head", lm_head_);

  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (ends_with(name, "c_proj.weight")) {
      normal_(p, proj_std);
    } else if (p.dim() >= 2) {
      normal_(p, 0.02);
    } else if (ends_with(name, ".bias")) {
      NoGradGuard no_grad;
      p.zero_();
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  VOLT_CHECK(idx.dim() == 2, "GPT", "expected token ids (B, T), got " << idx.meta_str());
  const int64_t T = idx.size(1);
  VOLT_CHECK(T <= config_.block_size, "GPT",
             "a sequence of " << T << " tokens is longer than the position table (block_size="
                              << config_.block_size << ")");
  Tensor tok = (*wte_)(idx);                            // (B, T, C)
  Tensor pos = wpe_->weight().narrow(0, 0, T);          // (T, C): the rows of positions 0 .. T-1
  Tensor x = (*drop_)(tok + pos);
  for (const auto& block : *h_) x = (*block)(x);
  return (*lm_head_)((*ln_f_)(x));                      // (B, T, V)
}

GPTOutput GPT::forward(const Tensor& idx, const Tensor& targets) {
  Tensor logits = forward(idx);
  VOLT_CHECK(targets.sizes() == idx.sizes(), "GPT",
             "targets must have the shape of the inputs " << idx.meta_str() << ", got " << targets.meta_str());
  const int64_t n = idx.size(0) * idx.size(1);
  Tensor loss = volt::cross_entropy(logits.reshape({n, config_.vocab_size}), targets.reshape({n}));
  return {logits, loss};
}

namespace {

// One token drawn from a row of logits (already divided by the temperature).
int64_t sample_row(std::vector<double> logits, int64_t top_k, std::mt19937_64& rng) {
  const int64_t v = static_cast<int64_t>(logits.size());
  if (top_k > 0 && top_k < v) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<double>());
    const double kth = sorted[top_k - 1];
    for (double& l : logits)
      if (l < kth) l = -std::numeric_limits<double>::infinity();
  }
  // A NaN or +Inf logit (a diverged model, or a temperature so small that the
  // division overflows) would make every weight NaN and pick a token silently.
  for (int64_t i = 0; i < v; ++i)
    VOLT_CHECK(!std::isnan(logits[i]) && logits[i] != std::numeric_limits<double>::infinity(), "GPT::generate",
               "the logits divided by the temperature must be finite or -inf, got " << logits[i] << " for token " << i);
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> cumulative(v);
  double total = 0;
  for (int64_t i = 0; i < v; ++i) cumulative[i] = total += std::exp(logits[i] - top);
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  const int64_t i = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
  return std::min(i, v - 1);  // u == total (rounding) picks the last token with weight
}

}  // namespace

Tensor GPT::generate(const Tensor& idx, int64_t max_new_tokens, const GenerateOptions& options) {
  VOLT_CHECK(idx.dim() == 2 && idx.size(1) > 0, "GPT::generate", "expected a prompt (B, T) with T >= 1, got "
                                                                      << idx.meta_str());
  VOLT_CHECK(max_new_tokens >= 0, "GPT::generate", "max_new_tokens must be >= 0, got " << max_new_tokens);
  VOLT_CHECK(options.temperature > 0, "GPT::generate", "temperature must be positive, got " << options.temperature);
  NoGradGuard no_grad;
  std::mt19937_64 rng(options.seed);
  const int64_t B = idx.size(0), V = config_.vocab_size;
  Tensor out = idx;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t T = out.size(1), keep = std::min(T, config_.block_size);
    Tensor logits = forward(out.narrow(1, T - keep, keep)).select(1, keep - 1);  // (B, V)
    std::vector<double> all = (logits / options.temperature).to_vector<double>();
    std::vector<int64_t> next(B);
    for (int64_t b = 0; b < B; ++b)
      next[b] = sample_row(std::vector<double>(all.begin() + b * V, all.begin() + (b + 1) * V), options.top_k, rng);
    out = volt::cat({out, Tensor::from_vector(next, {B, 1}).to(out.dtype()).to(out.device())}, 1);
  }
  return out;
}

int64_t GPT::num_parameters_non_embedding() const { return num_parameters() - wpe_->weight().numel(); }

}  // namespace volt::nn
