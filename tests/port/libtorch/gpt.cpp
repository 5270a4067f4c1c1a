// A small character-level GPT (nanoGPT's layout) trained on a fixed text with
// AdamW, evaluated, and sampled from with top-k.  The two copies of this
// program (tests/port/libtorch/ and tests/port/volt/) differ only by the
// renames in tests/port/renames.sed.
//
// Usage: gpt [STEPS [DROPOUT [WEIGHTS]]]
//   WEIGHTS: a raw float32 file with every parameter, in named_parameters()
//   order (as llm.c's checkpoints); without it, the weights are drawn.
// Prints "step S loss L" for every step, then "eval loss L" and a sample.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

using namespace torch::indexing;

const char* const kText =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered as the rightful property of some one or other "
    "of their daughters. My dear Mr. Bennet, said his lady to him one day, have you heard that "
    "Netherfield Park is let at last? Mr. Bennet replied that he had not. But it is, returned she; "
    "for Mrs. Long has just been here, and she told me all about it.";

struct GPTConfig {
  int64_t vocab_size = 0;
  int64_t block_size = 32;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 48;
  double dropout = 0.0;
};

struct CausalSelfAttention : torch::nn::Module {
  explicit CausalSelfAttention(const GPTConfig& c) : n_head(c.n_head), n_embd(c.n_embd) {
    c_attn = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
    c_proj = register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd));
    attn_dropout = register_module("attn_dropout", torch::nn::Dropout(c.dropout));
    resid_dropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
    // 1 where a position may attend (itself and the past), 0 elsewhere
    bias = register_buffer("bias", torch::tril(torch::ones({c.block_size, c.block_size}))
                                       .view({1, 1, c.block_size, c.block_size}));
  }

  // x: (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<torch::Tensor> qkv = c_attn->forward(x).split(n_embd, 2);
    // (B, T, C) -> (B, nh, T, hs)
    torch::Tensor q = qkv[0].view({B, T, n_head, C / n_head}).transpose(1, 2);
    torch::Tensor k = qkv[1].view({B, T, n_head, C / n_head}).transpose(1, 2);
    torch::Tensor v = qkv[2].view({B, T, n_head, C / n_head}).transpose(1, 2);
    // (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(k.size(-1))));
    att = att.masked_fill(bias.index({Slice(), Slice(), Slice(None, T), Slice(None, T)}) == 0,
                          -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    att = attn_dropout->forward(att);
    torch::Tensor y = torch::matmul(att, v);                    // (B, nh, T, hs)
    y = y.transpose(1, 2).contiguous().view({B, T, C});         // heads side by side
    return resid_dropout->forward(c_proj->forward(y));
  }

  int64_t n_head, n_embd;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
  torch::Tensor bias;
};

struct FeedForward : torch::nn::Module {
  explicit FeedForward(const GPTConfig& c) {
    c_fc = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
    c_proj = register_module("c_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }

  // x: (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x) {
    return dropout->forward(c_proj->forward(torch::gelu(c_fc->forward(x))));
  }

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};

struct Block : torch::nn::Module {
  explicit Block(const GPTConfig& c) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    mlp = register_module("mlp", std::make_shared<FeedForward>(c));
  }

  // x: (B, T, C) -> (B, T, C), pre-norm residual
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x + attn->forward(ln_1->forward(x));
    return h + mlp->forward(ln_2->forward(h));
  }

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<FeedForward> mlp;
};

struct GPT : torch::nn::Module {
  explicit GPT(const GPTConfig& c) : config(c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
    drop = register_module("drop", torch::nn::Dropout(c.dropout));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    // GPT-2's init: N(0, 0.02) for every matrix (the norms keep their ones and zeros)
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.value().dim() == 2) torch::nn::init::normal_(p.value(), 0.0, 0.02);
    }
  }

  // idx: (B, T) token ids -> (B, T, vocab_size) logits
  torch::Tensor forward(const torch::Tensor& idx) {
    const int64_t T = idx.size(1);
    torch::Tensor pos = torch::arange(T);
    torch::Tensor x = drop->forward(wte->forward(idx) + wpe->forward(pos));
    for (const auto& block : *h) x = block->as<Block>()->forward(x);
    x = ln_f->forward(x);
    // the output projection is the token embedding (tied weights, as GPT-2)
    return torch::nn::functional::linear(x, wte->weight);
  }

  GPTConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};

// Reads every parameter, in named_parameters() order, from a raw float32 file.
void load_weights(GPT& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("gpt: cannot open " + path);
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    std::vector<float> values(static_cast<size_t>(p.value().numel()));
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
    if (!in) throw std::runtime_error("gpt: " + path + " ends before " + p.key());
    p.value().copy_(torch::from_blob(values.data(), p.value().sizes()));
  }
}

// Window b of step `step`: B windows of T + 1 characters, spread over the text
// and moving along it from step to step.  -> (x, y), each (B, T)
std::tuple<torch::Tensor, torch::Tensor> get_batch(const torch::Tensor& data, int64_t step, int64_t B, int64_t T) {
  const int64_t span = data.size(0) - T - 1;
  std::vector<torch::Tensor> xs, ys;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = (step * 7 + b * (span / B)) % span;
    xs.push_back(data.index({Slice(i, i + T)}));
    ys.push_back(data.index({Slice(i + 1, i + T + 1)}));
  }
  return {torch::stack(xs), torch::stack(ys)};
}

int main(int argc, char* argv[]) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  const double dropout = argc > 2 ? std::atof(argv[2]) : 0.1;
  const std::string weights = argc > 3 ? argv[3] : "";
  torch::manual_seed(0);

  const std::string text = kText;
  const std::set<char> chars(text.begin(), text.end());
  const std::vector<char> itos(chars.begin(), chars.end());
  std::vector<int64_t> ids;
  for (char ch : text) ids.push_back(std::distance(chars.begin(), chars.find(ch)));
  torch::Tensor data = torch::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, torch::kLong).clone();

  GPTConfig config;
  config.vocab_size = static_cast<int64_t>(itos.size());
  config.dropout = dropout;
  auto model = std::make_shared<GPT>(config);
  if (!weights.empty()) load_weights(*model, weights);
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  std::cout << "vocab " << config.vocab_size << ", text " << data.size(0) << " characters, parameters " << count
            << "\n";

  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1));
  const int64_t B = 8, T = config.block_size, V = config.vocab_size;
  float first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    model->train();
    auto [x, y] = get_batch(data, step, B, T);
    torch::Tensor logits = model->forward(x);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.view({-1, V}), y.view({-1}));
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    last = loss.item<float>();
    if (step == 0) first = last;
    std::printf("step %lld loss %.6f\n", static_cast<long long>(step), last);
  }

  torch::NoGradGuard no_grad;
  model->eval();
  float eval_loss = 0;
  for (int64_t k = 0; k < 4; ++k) {
    auto [x, y] = get_batch(data, 1000 + k, B, T);
    eval_loss += torch::nn::functional::cross_entropy(model->forward(x).view({-1, V}), y.view({-1})).item<float>() / 4;
  }
  std::printf("eval loss %.6f\n", eval_loss);

  // Sampling: the last position's logits, the top 5 kept, one token drawn.
  torch::Tensor idx = data.index({Slice(0, 8)}).view({1, 8});
  for (int64_t n = 0; n < 64; ++n) {
    torch::Tensor cond = idx.size(1) <= T ? idx : idx.index({Slice(), Slice(-T, None)});
    torch::Tensor logits = model->forward(cond).index({Slice(), -1, Slice()}) / 0.8;
    auto [top, unused] = torch::topk(logits, 5);
    logits = logits.masked_fill(logits < top.index({Slice(), Slice(-1, None)}), -std::numeric_limits<float>::infinity());
    torch::Tensor next = torch::multinomial(torch::softmax(logits, -1), 1);
    idx = torch::cat({idx, next}, 1);
  }
  bool valid = true;
  std::string sample;
  for (int64_t n = 0; n < idx.size(1); ++n) {
    const int64_t id = idx.index({0, n}).item<int64_t>();
    valid = valid && id >= 0 && id < V;
    sample += valid ? itos[static_cast<size_t>(id)] : '?';
  }
  std::cout << "sample: " << sample << "\n";
  std::cout << "loss " << first << " -> " << last << ", eval " << eval_loss << ", sample tokens "
            << (valid ? "valid" : "INVALID") << "\n";
  return valid && last < first && std::isfinite(eval_loss) ? 0 : 1;
}
