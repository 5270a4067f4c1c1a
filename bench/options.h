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
  bool amp_only = false;       // with amp: the autocast cells alone (to profile them)
  bool batches_given = false, modes_given = false;
};

// The command line parsed (CLI11, volt/utils/cli.h): the options, or, where
// status >= 0, what to print instead (the usage for --help, status 0; a usage
// error, status 2).  Neither prints nor exits.
struct ParsedArgs {
  Options options;
  int status = -1;
  std::string text;
};
ParsedArgs parse_command_line(int argc, const char* const* argv);

// volt_bench's arguments; --help prints the usage and exits 0, a bad one is a
// usage error (exit status 2).
Options parse_args(int argc, char** argv);

// A usage error found later ("--model cnn runs on the cpu only"): the message
// on stderr, exit status 2.
[[noreturn]] void usage_error(const std::string& message);

}  // namespace volt::benchmark
