// volt_bench --model gpt: the default GPT of examples/gpt (vocab 256, block
// 128, 4 layers, 4 heads, width 128) trained with AdamW (two groups),
// clipping at 1.0 and cross-entropy on synthetic random windows of batch 16,
// in the modes eager, jit (the loss jitted), step (compile_step) and lazy, on
// the CPU and, when present, CUDA, against bench/libtorch_bench --model gpt.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bench_gpt {

struct Options {
  std::vector<std::string> modes;    // eager, jit, step, lazy
  std::vector<std::string> devices;  // cpu, cuda
  int64_t batch = 16;
  int64_t steps = 0;    // timed steps per cell; 0: until the median is stable
  int64_t warmup = -1;  // -1: automatic
  int threads = 0;      // passed on to LibTorch (volt's are already set)
  bool json = false;
  std::string libtorch;  // the libtorch_bench binary, "" to skip the baseline
  std::string amp;       // bf16 or f16: every mode again with autocast ("jit+bf16"), "" none
  bool amp_only = false; // with amp: the autocast cells alone
};

// Runs every mode on every device, then the baseline, and prints the table
// (or JSON lines); returns the process's exit status.
int run(const Options& o);

}  // namespace bench_gpt
