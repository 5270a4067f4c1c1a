// libtorch_bench's GPT (bench/libtorch_gpt.cpp): nanoGPT's layout in LibTorch.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

namespace gpt {

// The default configuration of volt's examples/gpt.
struct Config {
  int64_t vocab = 256, block = 128, layers = 4, heads = 4, width = 128, batch = 16;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1;
  int64_t warmup = 100, decay_steps = 2000;
  uint64_t seed = 0;
  bool amp_bf16 = false;  // forward and loss under LibTorch's CPU autocast to bf16
};

// LibTorch's CPU autocast to bf16 while it lives, as `with torch.autocast("cpu",
// dtype=torch.bfloat16):` does (its cache of casts cleared on leaving); off: nothing.
class CpuAutocast {
 public:
  explicit CpuAutocast(bool on) : on_(on), was_(at::autocast::is_cpu_enabled()) {
    if (!on_) return;
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool on_, was_;
};

// The model, AdamW over two parameter groups, the schedule and clipping.
class Trainer {
 public:
  explicit Trainer(const Config& c);
  double step(const torch::Tensor& x, const torch::Tensor& y);  // returns the loss
  double val_loss(const std::string& text, size_t begin, size_t end);

 private:
  Config c_;
  std::shared_ptr<torch::nn::Module> module_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  int64_t step_ = 0;
};

// Times training steps (no text), or trains on a text file and prints the
// validation loss every `eval_every` steps.
int run(const Config& c, bool json, int64_t timed_steps, const std::string& text_path, int64_t train_steps,
        int64_t eval_every);

}  // namespace gpt
