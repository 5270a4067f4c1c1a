// A GPT saved by volt (nn::save) loads into a PyTorch model of nanoGPT's
// layout by name and gives the same logits within 1e-5
// (tests/nn/gpt_torch_check.py). Needs python3 with torch; says it skipped
// where that is missing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include <volt/nn/gpt.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/random.h>

#include "examples/run_example.h"
#include "tests/skip.h"
#include "tests/torch_python.h"

using namespace volt;
namespace fs = std::filesystem;

TEST_CASE("GPT: a model saved by volt loads into PyTorch's nanoGPT layout by name, same logits") {
  using volt::testing::run_command;
  const std::string& python = volt::testing::torch_python();
  if (python.empty()) VOLT_SKIP("no python3 here can import torch");
  const nn::GPTConfig config{.block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32};
  manual_seed(8);
  nn::GPT gpt(config);
  gpt.eval();
  // Biases and gains away from their initial 0 and 1, so that a misplaced one shows.
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : gpt.named_parameters())
      if (p.dim() == 1) p.add_(Tensor::randn(p.sizes()) * 0.1);
  }
  const Tensor idx = Tensor::randint(0, config.vocab_size, {3, 11});
  const Tensor logits = gpt.forward(idx);
  const fs::path dir = fs::temp_directory_path() / ("volt_gpt_torch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nn::save(gpt, (dir / "gpt.safetensors").string());
  nn::save_tensors({{"idx", idx}, {"logits", logits.detach()}}, (dir / "io.safetensors").string());
  const std::string cmd = python + " " + VOLT_SOURCE_DIR + "/tests/nn/gpt_torch_check.py " +
                          (dir / "gpt.safetensors").string() + " " + (dir / "io.safetensors").string() + " " +
                          std::to_string(config.n_layer) + " " + std::to_string(config.n_head) + " " +
                          std::to_string(config.n_embd) + " " + std::to_string(config.block_size) + " " +
                          std::to_string(config.vocab_size);
  const auto r = run_command(cmd);
  MESSAGE(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("max abs diff") != std::string::npos);
  fs::remove_all(dir);
}
