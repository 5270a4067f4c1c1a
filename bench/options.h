// volt_bench's command line (bench/options.cpp): which cells to time, how,
// and which figures besides them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace volt::benchmark {

inline const std::vector<std::string> kModes = {"eager", "jit", "step", "lazy"};

struct Options {
  std::vector<std::string> modes = kModes;
  std::vector<std::string> devices = {"cpu", "cuda"};
  std::vector<int64_t> batches = {8, 64, 256, 1024};
  int64_t steps = 0;    // timed steps per cell; 0: until the median is stable
  int64_t warmup = -1;  // -1: automatic
  bool json = false, smoke = false;
  bool eval = true;            // time the eval forward too
  bool extras = true;          // first call, overhead, bandwidth, RSS
  std::string libtorch;        // path of libtorch_bench; "" = next to volt_bench if built
  bool no_libtorch = false;
  std::string pytorch;         // path of bench/pytorch_bench.py, run when given
  std::string data_dir;        // MNIST batches instead of synthetic ones
  int64_t first_call_batch = -1;  // internal: child process measuring one first call
  std::string first_call_device = "cpu";
  // CPU figures (bench/cpu_figures.h)
  int threads = 0;             // volt's and LibTorch's threads; 0: their defaults
  bool busy = false;           // the busy-machine scenario
  bool epoch = false;          // a full MNIST epoch per mode and batch (needs --data-dir)
  std::string model = "mlp";   // mlp: the matrix below; cnn: bench/cnn_workload.h
  std::string amp;             // bf16 or f16: every mode again under autocast ("jit+bf16"); "" none
  bool batches_given = false, modes_given = false;
};

// volt_bench's arguments; a bad one is a usage error.
Options parse_args(int argc, char** argv);

// Prints the message and the usage to stderr and exits with status 2.
[[noreturn]] void usage_error(const std::string& message);

}  // namespace volt::benchmark
