// volt::nn::GPT — a GPT-2-style decoder with nanoGPT's layout and parameter
// names, built from volt ops alone (attention is scaled_dot_product_attention, a
// composite whose decomposition is prims), so the module jit, compile_step and
// the lazy device all trace it; the jit's flash executor runs its attention tiled.
//
//   volt::manual_seed(0);
//   auto gpt = std::make_shared<volt::nn::GPT>(volt::nn::GPTConfig{});   // vocab 256, block 128, 4 x 128
//   auto [logits, loss] = gpt->forward(idx, targets);   // idx, targets: (B, T) i64 -> (B, T, 256), ()
//   volt::Tensor more = gpt->generate(prompt, 100, {.temperature = 0.8, .top_k = 40, .seed = 1});
//
// Parameter names: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
// transformer.ln_f.{weight, bias}; lm_head.weight is transformer.wte.weight (one
// tensor: named_parameters() lists it once, state_dict() and nn::save under both names).
#pragma once
#include <cstdint>
#include <memory>

#include <volt/nn/activation.h>
#include <volt/nn/container.h>
#include <volt/nn/embedding.h>
#include <volt/nn/layer_norm.h>
#include <volt/nn/linear.h>

namespace volt::nn {

struct GPTConfig {
  int64_t block_size = 128;  // the longest sequence: rows of the position table
  int64_t vocab_size = 256;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms
};

// Multi-head attention where each position sees itself and the positions before it.
// x: (B, T, C) -> (B, T, C)
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;
  int64_t n_head() const { return n_head_; }

 private:
  int64_t n_head_, n_embd_;
  std::shared_ptr<Linear> c_attn_, c_proj_;  // (C -> 3C): q, k, v side by side; (C -> C)
  std::shared_ptr<Dropout> attn_dropout_, resid_dropout_;
};

// c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout.  x: (B, T, C) -> (B, T, C)
class GPTMLP : public Module {
 public:
  explicit GPTMLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<GELU> gelu_;
  std::shared_ptr<Dropout> dropout_;
};

// Pre-LN, as GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).  x: (B, T, C) -> (B, T, C)
class Block : public Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;
  const std::shared_ptr<CausalSelfAttention>& attn() const { return attn_; }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GPTMLP> mlp_;
};

struct GPTOutput {
  Tensor logits;  // (B, T, vocab)
  Tensor loss;    // () mean cross-entropy over the B*T positions; undefined without targets
};

struct GenerateOptions {
  double temperature = 1.0;  // > 0: the logits are divided by it before sampling
  int64_t top_k = 0;         // > 0: sample among the k likeliest tokens only (1 is greedy)
  uint64_t seed = 0;         // the sampler's own generator (std::mt19937_64)
};

class GPT : public Module {
 public:
  // GPT-2's init from the global generator: Linear and Embedding weights
  // N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 n_layer)), biases 0,
  // LayerNorm gains 1.
  explicit GPT(const GPTConfig& config = {});

  // idx: (B, T) token ids, T <= block_size -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override;
  // With targets (B, T): the logits and their mean cross-entropy.
  GPTOutput forward(const Tensor& idx, const Tensor& targets);
  using Module::operator();

  // Appends max_new_tokens tokens to idx (B, T), each sampled from the model's
  // distribution for the next token given the last block_size tokens; the
  // same seed gives the same tokens.  Runs without gradients, in the current
  // train/eval mode (call eval() first when dropout > 0).  -> (B, T + max_new_tokens)
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, const GenerateOptions& options = {});

  const GPTConfig& config() const { return config_; }
  const std::shared_ptr<ModuleList>& blocks() const { return h_; }
  // Parameters not counting the position table, as nanoGPT reports them.
  int64_t num_parameters_non_embedding() const;

 private:
  GPTConfig config_;
  std::shared_ptr<ModuleDict> transformer_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<ModuleList> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace volt::nn
