// Chapter 10, a GPT (docs/tutorial/10_gpt.md): causal self-attention written
// with volt ops, traced by the module jit into prims; which prims fused into
// generated kernels and which ran as calls of their own; then the same block
// with the flash executor, which runs the attention op tiled.
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <volt/jit/flash_attention.h>
#include <volt/jit/jit.h>
#include <volt/nn/gpt.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

// What fused, and what ran on its own.
void summarize(const jit::Trace& t) {
  std::map<std::string, int> alone;
  int regions = 0, fused_prims = 0;
  for (const jit::BoundSymbol& b : t.bsyms) {
    if (b.is_fusion()) {
      ++regions;
      fused_prims += static_cast<int>(b.subsymbols.size());
    } else {
      ++alone[op_name(b.call)];
    }
  }
  std::cout << "\n" << regions << " fused regions hold " << fused_prims << " prims; outside them:";
  for (const auto& [name, n] : alone) std::cout << " " << name << " x" << n;
  std::cout << "\n";
}

int main() {
  manual_seed(0);
  const nn::GPTConfig config{.block_size = 4, .vocab_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 8};
  nn::GPT gpt(config);
  std::cout << gpt << "\n";

  // One block's attention, jitted on its own, forward only; first without
  // the flash executor, so the attention op runs as its prims.
  auto attn = gpt.blocks()->at<nn::Block>(0)->attn();
  attn->eval();
  NoGradGuard no_grad;
  jit::remove_default_executor(jit::flash_executor());
  jit::JitFunction f = jit::jit(attn);
  jit::add_default_executor(jit::flash_executor());
  Tensor x = Tensor::randn({1, config.block_size, config.n_embd});
  Tensor y = f(x);
  std::cout << "\nattention(x) has shape " << y.meta_str() << "; eager gives the same: "
            << (allclose(y, (*attn)(x), 1e-5, 1e-6) ? "yes" : "no") << "\n";

  const jit::Trace& last = jit::last_traces(f).back();
  std::cout << "\nThe trace that runs:\n" << last.str();
  summarize(last);

  // With the default executors: flash takes the attention op whole.
  jit::JitFunction fast = jit::jit(attn);
  std::cout << "\nWith flash, the same: " << (allclose(fast(x), y, 1e-5, 1e-6) ? "yes" : "no") << "; its line:\n";
  const jit::Trace& tiled = jit::last_traces(fast).back();
  std::istringstream lines(tiled.str());
  for (std::string line; std::getline(lines, line);)
    if (line.find("flash_attention(") != std::string::npos) std::cout << line << "\n";
  summarize(tiled);
  return 0;
}
