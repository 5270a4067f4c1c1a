// volt_bench --model cnn: the Lazy Tensor tutorial's MNIST CNN (nn::MnistCNN:
// conv 32, conv 64, max_pool 2, dropouts, fc 9216 -> 128 -> 10, log_softmax)
// trained with nll_loss and Adadelta (lr 1.0) on synthetic MNIST-shaped
// batches (B, 1, 28, 28), in the modes eager, jit (the module jitted), step
// (compile_step) and lazy, on the CPU, against bench/libtorch_bench --model cnn.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bench_cnn {

struct Options {
  std::vector<std::string> modes;  // eager, jit, step, lazy
  std::vector<int64_t> batches;
  int64_t steps = 0;    // timed steps per cell; 0: until the median is stable
  int64_t warmup = -1;  // -1: automatic
  int threads = 0;      // passed on to LibTorch (volt's are already set)
  bool json = false;
  std::string libtorch;  // the libtorch_bench binary, "" to skip the baseline
};

// Runs every mode at every batch (training steps), then the baseline, and
// prints the table (or JSON lines); returns the process's exit status.
int run(const Options& o);

}  // namespace bench_cnn
