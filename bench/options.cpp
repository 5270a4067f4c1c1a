// volt_bench's command line (bench/options.h).
#include "options.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>

namespace volt::benchmark {

namespace {

const char* kUsage =
    "usage: volt_bench [options]\n"
    "  --model NAME       mlp (default) or cnn: the MNIST CNN, Adadelta, cpu training steps,\n"
    "                     batch 64 unless --batch (bench/cnn_workload.h); gpt: examples/gpt's\n"
    "                     GPT, AdamW, batch 16 unless --batch, cpu and cuda (bench/gpt_workload.h);\n"
    "                     attention: flash against the decomposition, forward+backward, cpu,\n"
    "                     --batch gives the sequence lengths (bench/attention_bench.h)\n"
    "  --mode LIST        eager,jit,step,lazy (default: all modes this build has;\n"
    "                     step: the whole training step compiled by volt::jit::compile_step)\n"
    "  --device LIST      cpu,cuda (default: both; cuda only when available)\n"
    "  --batch LIST       batch sizes (default 8,64,256,1024)\n"
    "  --steps N          timed steps per cell (default: until the median is stable)\n"
    "  --warmup N         untimed steps per cell first (default: automatic)\n"
    "  --data-dir PATH    MNIST batches from PATH (data::MNIST) instead of synthetic ones\n"
    "  --no-eval          time training steps only\n"
    "  --no-extras        skip first-call, overhead, bandwidth and memory figures\n"
    "  --libtorch PATH    the libtorch_bench binary to compare with (default: next to volt_bench)\n"
    "  --no-libtorch      do not run LibTorch\n"
    "  --pytorch PATH     also run bench/pytorch_bench.py (with $VOLT_PYTHON, default /usr/bin/python3)\n"
    "  --threads N        CPU threads for volt and LibTorch (default: OMP_NUM_THREADS or all cores)\n"
    "  --amp TYPE         bf16 or f16: time every mlp/gpt cell again with autocast to TYPE (mode\n"
    "                     \"jit+bf16\"; volt::AutocastGuard, StepOptions::autocast), and LibTorch's\n"
    "                     CPU autocast for bf16\n"
    "  --busy             also run an eager cell with 1 and 2 threads while 2 busy processes compete\n"
    "  --epoch            with --data-dir: time a full epoch per mode and batch (the example's loop)\n"
    "  --json             print one JSON array instead of tables\n"
    "  --smoke            every cell, few steps, no LibTorch, no cold compile (for ./test.sh)\n"
    "  --help             this text\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t to_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    long long n = std::stoll(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  usage_error(flag + ": '" + v + "' is not a number");
}

}  // namespace

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "volt_bench: " << message << "\n" << kUsage;
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool steps_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const bool inline_value = arg.find('=') != std::string::npos;
    if (inline_value) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--model") {
      o.model = next();
      if (o.model != "mlp" && o.model != "cnn" && o.model != "gpt" && o.model != "attention")
        usage_error("--model: unknown model '" + o.model + "' (mlp, cnn, gpt, attention)");
    } else if (arg == "--mode") {
      o.modes = split(next());
      o.modes_given = true;
    } else if (arg == "--device") {
      o.devices = split(next());
    } else if (arg == "--batch") {
      o.batches.clear();
      o.batches_given = true;
      for (const auto& b : split(next())) o.batches.push_back(to_int(arg, b));
    } else if (arg == "--steps") {
      o.steps = to_int(arg, next());
      steps_given = true;
    } else if (arg == "--warmup") {
      o.warmup = to_int(arg, next());
    } else if (arg == "--data-dir") {
      o.data_dir = next();
    } else if (arg == "--no-eval") {
      o.eval = false;
    } else if (arg == "--no-extras") {
      o.extras = false;
    } else if (arg == "--libtorch") {
      o.libtorch = next();
    } else if (arg == "--no-libtorch") {
      o.no_libtorch = true;
    } else if (arg == "--pytorch") {
      o.pytorch = next();
    } else if (arg == "--threads") {
      o.threads = int(to_int(arg, next()));
      if (o.threads < 1) usage_error("--threads must be >= 1");
    } else if (arg == "--amp") {
      o.amp = next();
      if (o.amp != "bf16" && o.amp != "f16") usage_error("--amp: expected bf16 or f16, got '" + o.amp + "'");
    } else if (arg == "--busy") {
      o.busy = true;
    } else if (arg == "--epoch") {
      o.epoch = true;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--first-call") {  // internal, see measure_first_call
      o.first_call_batch = to_int(arg, next());
    } else if (arg == "--first-call-device") {
      o.first_call_device = next();
    } else {
      usage_error("unknown option " + arg);
    }
  }
  const std::vector<std::string> cnn_modes = {"eager", "jit", "step", "lazy"};  // bench/cnn_workload.cpp's
  if (o.model != "mlp" && !o.modes_given) o.modes = cnn_modes;  // gpt has the same four
  const std::vector<std::string>& known = o.model != "mlp" ? cnn_modes : kModes;
  for (const auto& m : o.modes)
    if (std::find(known.begin(), known.end(), m) == known.end())
      usage_error("--mode: unknown mode '" + m + "' (this build has eager, jit, step" +
                  (known.size() > 3 ? ", lazy)" : ")"));
  for (const auto& d : o.devices)
    if (d != "cpu" && d != "cuda") usage_error("--device: unknown device '" + d + "' (cpu, cuda)");
  for (int64_t b : o.batches)
    if (b < 1) usage_error("--batch: batch sizes must be >= 1");
  if (steps_given && o.steps < 1) usage_error("--steps must be >= 1");
  if (o.epoch && o.data_dir.empty()) usage_error("--epoch needs --data-dir");
  if (!o.amp.empty() && o.model != "mlp" && o.model != "gpt") usage_error("--amp: for --model mlp or gpt");
  if (o.smoke) {
    if (!steps_given) o.steps = 2;
    if (o.warmup < 0) o.warmup = 1;
    o.no_libtorch = true;
    o.pytorch.clear();
  }
  return o;
}

}  // namespace volt::benchmark
