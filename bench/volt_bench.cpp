// volt_bench: how fast volt trains and evaluates the seed model, eager and jit,
// on the CPU (and CUDA when this build and machine have it), batch 8 to 1024.
//
//   volt_bench                              # the whole matrix, a human table
//   volt_bench --mode jit --batch 8,256     # some cells
//   volt_bench --json > result.json         # one JSON array
//   volt_bench --steps 2 --smoke            # every cell once, quickly (./test.sh)
//   volt_bench --model cnn                  # the MNIST CNN instead (bench/cnn_workload.h)
//
// The workload is MLP(784, [784, 784, 784, 28, 10], dropout 0.1) with
// cross-entropy and Adam (lr 1e-3), as in examples/mnist_mlp.  A training step
// is forward, loss, zero_grad, backward and Adam's step; an eval step is one
// forward without grad.  Batches are held in memory (synthetic by default), so
// the figures are the framework's and not the disk's.  Each cell warms up, then
// times single steps until the median is stable; on CUDA every step ends with a
// device synchronisation, so a step's time includes its kernels.
//
// Besides the matrix it measures the jit's first call (trace + passes + compile)
// with a cold and with a warm kernel cache (each in a fresh process), the jit's
// cache-hit overhead on a + b of one-element tensors, the machine's copy
// bandwidth (to say how close to it the memory-bound batch-8 step runs), peak
// host RSS, and, when bench/libtorch_bench was built, LibTorch on the same cells.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cnn_workload.h"
#include "common.h"
#include "cpu_figures.h"
#include "distributed.h"
#include <volt/data/dataset.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/cpu_gemm.h>
#include <volt/tensor/cpu_threads.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>


#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/runtime.h>
#endif

using namespace volt;
using bench::Clock;
using bench::time_steps;
using bench::Timing;
using bench::us_since;

namespace {

// ============================================================ options

const std::vector<std::string> kModes = {"eager", "jit", "step", "lazy"};

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
  bool batches_given = false, modes_given = false;
};

const char* kUsage =
    "usage: volt_bench [options]\n"
    "  --model NAME       mlp (default) or cnn: the MNIST CNN, Adadelta, cpu training steps,\n"
    "                     batch 64 unless --batch (bench/cnn_workload.h)\n"
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
    "  --busy             also run an eager cell with 1 and 2 threads while 2 busy processes compete\n"
    "  --epoch            with --data-dir: time a full epoch per mode and batch (the example's loop)\n"
    "  --json             print one JSON array instead of tables\n"
    "  --smoke            every cell, few steps, no LibTorch, no cold compile (for ./test.sh)\n"
    "  --help             this text\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "volt_bench: " << message << "\n" << kUsage;
  std::exit(2);
}

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
      if (o.model != "mlp" && o.model != "cnn") usage_error("--model: unknown model '" + o.model + "' (mlp, cnn)");
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
  if (o.model == "cnn" && !o.modes_given) o.modes = cnn_modes;
  const std::vector<std::string>& known = o.model == "cnn" ? cnn_modes : kModes;
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
  if (o.smoke) {
    if (!steps_given) o.steps = 2;
    if (o.warmup < 0) o.warmup = 1;
    o.no_libtorch = true;
    o.pytorch.clear();
  }
  return o;
}

// ============================================================ the workload

using bench::kBatchesHeld;
using bench::kFeatures;

std::shared_ptr<nn::MLP> make_model(Device device) {
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(kFeatures, std::vector<int64_t>{784, 784, 784, 28, 10},
                                       /*bias=*/true, /*dropout=*/0.1);
  net->to(device);
  return net;
}

struct Batch {
  Tensor x, y;  // x: (B, 784) f32, y: (B) i64
};

// Synthetic batches: bench::synthetic_batch, the same numbers libtorch_bench uses.
std::vector<Batch> synthetic_batches(int64_t batch, Device device) {
  std::vector<Batch> out;
  for (int k = 0; k < kBatchesHeld; ++k) {
    bench::RawBatch b = bench::synthetic_batch(batch, k);
    out.push_back({Tensor::from_vector<float>(b.x, {batch, kFeatures}).to(device),
                   Tensor::from_vector<int64_t>(b.y, {batch}).to(device)});
  }
  return out;
}

// The first kBatchesHeld * batch training images, in order.
std::vector<Batch> mnist_batches(const data::MNIST& set, int64_t batch, Device device) {
  std::vector<Batch> out;
  for (int k = 0; k < kBatchesHeld; ++k) {
    std::vector<int64_t> idx(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) idx[i] = (k * batch + i) % set.size();
    Tensor x = Tensor::empty({batch, kFeatures}, DType::f32), y = Tensor::empty({batch}, DType::i64);
    set.gather(idx, x, y);
    out.push_back({x.to(device), y.to(device)});
  }
  return out;
}

void synchronize(Device device) {
  if (Backend* b = backend_for(device.type)) b->synchronize();
}

bool cuda_usable() {
  return backend_for(DeviceType::CUDA) != nullptr && cuda::is_available();
}

// ============================================================ modes
//
// A mode turns the module into the callables the loops use, says where the
// model and batches live, and what ends a step.  Adding a mode is one branch in
// make_runner and its name in kModes.

using ModelFn = std::function<Tensor(const Tensor&)>;

struct Runner {
  ModelFn train, eval;
  Device model_device;                        // where the module and the batches are put
  std::function<void(const Tensor&)> finish;  // ends a step (given its result)
};

Runner make_runner(const std::string& mode, const std::shared_ptr<nn::MLP>& net, Device device) {
  Runner r;
  r.model_device = device;
  r.finish = [device](const Tensor&) { synchronize(device); };
  if (mode == "eager") {
    r.train = r.eval = [net](const Tensor& x) { return (*net)(x); };
  } else if (mode == "jit" || mode == "step") {
    // One jitted callable serves both: its cache keys on the training flag and grad mode.
    // (step: run_cell compiles the whole training step around the plain module;
    // evaluation goes through the module jit.)
    auto f = std::make_shared<jit::JitFunction>(jit::jit(net));
    r.train = r.eval = [f](const Tensor& x) { return (*f)(x); };
    if (mode == "step") r.train = [net](const Tensor& x) { return (*net)(x); };
  }
  else if (mode == "lazy") {
    // The module and batches live on the lazy device; the step's graph runs on
    // `device` at mark_step (its compiled form is cached after the first step).
    lazy::set_backend(device);
    r.model_device = kLazy;
    r.train = r.eval = [net](const Tensor& x) { return (*net)(x); };
    r.finish = [device](const Tensor&) {
      lazy::mark_step();  // runs the step's one graph: loss, gradients and Adam
      lazy::wait_device_ops();
      synchronize(device);
    };
  }
  return r;
}

// ============================================================ timing


// A figure that is not a matrix cell: {"metric": name, key: value, ...}.
struct Metric {
  std::string name;
  std::vector<std::pair<std::string, double>> values;
  std::string note;
};

struct Cell {
  std::string mode, device, phase;  // phase: train or eval
  int64_t batch = 0;
  Timing t;
  double steps_per_s() const { return t.median_us > 0 ? 1e6 / t.median_us : 0; }
  double samples_per_s() const { return steps_per_s() * batch; }
};

// Times training and (optionally) evaluation of one mode/device/batch on a fresh model.
// On CUDA it also counts the kernel launches and cuBLAS calls of one more
// training step, into `metrics`.
std::vector<Cell> run_cell(const std::string& mode, Device device, int64_t batch,
                           const std::vector<Batch>& held, const Options& o, std::vector<Metric>& metrics) {
  auto net = make_model(device);
  net->train();
  Runner r = make_runner(mode, net, device);
  std::vector<Batch> moved;
  if (r.model_device != device) {
    net->to(r.model_device);
    for (const Batch& b : held) moved.push_back({b.x.to(r.model_device), b.y.to(r.model_device)});
  }
  const std::vector<Batch>& batches = moved.empty() ? held : moved;
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  size_t k = 0;
  auto body = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = loss_fn(r.train(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  // step: the same body, compiled once into one planned program.
  std::unique_ptr<jit::CompiledStep> compiled;
  if (mode == "step")
    compiled = std::make_unique<jit::CompiledStep>(
        jit::compile_step(body, {.state = {*net, opt}, .reuse_outputs = true}));
  auto train_step = [&] {
    const Batch& b = batches[k++ % batches.size()];
    r.finish(compiled ? (*compiled)(b.x, b.y) : body(b.x, b.y));
  };
  std::vector<Cell> cells;
  const std::string dev = device.is_cuda() ? "cuda" : "cpu";
  const auto c0 = Clock::now();
  train_step();  // the first step (compiles, for step and jit)
  const double first_us = us_since(c0);
  cells.push_back({mode, dev, "train", batch, time_steps(train_step, o.steps, o.warmup)});
  {
    const uint64_t before = Storage::allocation_count();
    for (int i = 0; i < 5; ++i) train_step();
    metrics.push_back({"allocations_per_step",
                       {{"batch", double(batch)}, {"allocations", double(Storage::allocation_count() - before) / 5}},
                       mode + " " + dev + " training step: tensor allocations (Storage::allocate) per step"});
    if (compiled)
      metrics.push_back({"step_compile",
                         {{"batch", double(batch)},
                          {"compile_ms", compiled->last_compile_ms()},
                          {"first_step_ms", first_us / 1e3},
                          {"arena_mb", compiled->arena_bytes() / 1e6}},
                         "compiled training step: passes (tracing to memory plan), first step, arena size"});
  }
#ifndef VOLT_WITH_CUDA
  (void)metrics;  // launches are counted on CUDA only
#else
  if (device.is_cuda()) {
    cuda::synchronize(device.index);
    const cuda::LaunchCounts before = cuda::launch_counts();
    const auto sim_before = cuda::simulated_counters();
    const int64_t graphs_before = cuda::graph_launches(), mallocs_before = cuda::memory_stats(device.index).malloc_calls;
    const uint64_t storages_before = Storage::allocation_count();
    constexpr int kCounted = 3;
    // The steps alone, without the wait that ends a timed step.
    for (int i = 0; i < kCounted; ++i) {
      const Batch& b = batches[k++ % batches.size()];
      (void)(compiled ? (*compiled)(b.x, b.y) : body(b.x, b.y));
    }
    const auto sim_after = cuda::simulated_counters();
    const cuda::LaunchCounts after = cuda::launch_counts();
    auto per_step = [&](double d) { return d / kCounted; };
    metrics.push_back({"cuda_kernel_launches",
                       {{"batch", double(batch)},
                        {"kernels", per_step(double(after.kernels - before.kernels))},
                        {"cublas_calls", per_step(double(after.cublas_calls - before.cublas_calls))}},
                       mode + " training step: volt's kernel launches, and cuBLAS calls counted one each"});
    // Per step, from the host's side: what a GPU would be asked to do.
    std::vector<std::pair<std::string, double>> v = {
        {"batch", double(batch)},
        {"graph_launches", per_step(double(cuda::graph_launches() - graphs_before))},
        {"graph_kernel_nodes", double(compiled ? compiled->graph_kernel_nodes() : 0)},
        {"graph_copy_nodes", double(compiled ? compiled->graph_memcpy_nodes() : 0)},
        {"cuda_mallocs", per_step(double(cuda::memory_stats(device.index).malloc_calls - mallocs_before))},
        {"allocations", per_step(double(Storage::allocation_count() - storages_before))}};
    if (sim_before && sim_after) {  // on tests/cudasim: what the device saw
      v.push_back({"host_syncs", per_step(double(sim_after->host_syncs - sim_before->host_syncs))});
      v.push_back({"launches_outside_graphs",
                   per_step(double(sim_after->kernel_launches - sim_before->kernel_launches))});
      v.push_back({"copies_outside_graphs", per_step(double(sim_after->copies - sim_before->copies))});
    }
    metrics.push_back({"cuda_step_work", v,
                       mode + " training step on " + device.str() + ", per step" +
                           (sim_before ? " (host_syncs etc. counted by the simulated GPU)" : "")});
    cuda::synchronize(device.index);
  }
#endif
  if (o.eval) {
    net->eval();
    NoGradGuard no_grad;
    auto eval_step = [&] {
      const Batch& b = batches[k++ % batches.size()];
      r.finish(r.eval(b.x));
    };
    cells.push_back({mode, dev, "eval", batch, time_steps(eval_step, o.steps, o.warmup)});
  }
  return cells;
}

// ============================================================ other figures


std::string self_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("volt_bench") : p.string();
}

// Runs a command and returns its standard output ("" if it failed).
std::string run_capture(const std::string& cmd, int* status = nullptr) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int rc = ::pclose(p);
    if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  } else if (status) {
    *status = -1;
  }
  return out;
}

// The number after "key": in a one-line JSON object (NaN when absent).
double json_number(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t at = line.find(k);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}
std::string json_string(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  size_t at = line.find(k);
  if (at == std::string::npos) return "";
  size_t end = line.find('"', at + k.size());
  return line.substr(at + k.size(), end - at - k.size());
}

// Child process: the first jitted training step (trace, passes, compile of the
// forward and backward kernels, and running them once), then the second one for
// comparison.  It runs in a fresh process so that no kernel library is loaded yet.
int first_call_child(const Options& o) {
  const Device device = Device::parse(o.first_call_device);
  auto net = make_model(device);
  net->train();
  auto batches = synthetic_batches(o.first_call_batch, device);
  auto jm = std::make_shared<jit::JitFunction>(jit::jit(net));
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  double ms[2];
  for (int i = 0; i < 2; ++i) {
    const auto t0 = Clock::now();
    Tensor loss = loss_fn((*jm)(batches[i].x), batches[i].y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    synchronize(device);
    ms[i] = us_since(t0) / 1e3;
  }
  auto stats = jit::compile_stats(*jm);
  std::printf("{\"first_ms\":%.3f,\"second_ms\":%.3f,\"jit_ms\":%.3f,\"fusions\":%d}\n", ms[0],
              ms[1], stats.total_ms, stats.fusions);
  return 0;
}

std::vector<Metric> measure_first_call(const Options& o) {
  std::vector<Metric> out;
  namespace fs = std::filesystem;
  const int64_t batch = 8;
  // Cold: an empty kernel cache directory; warm: the same directory again.
  std::string cold_dir;
  if (!o.smoke) {
    char tmpl[] = "/tmp/volt_bench_kernels_XXXXXX";
    if (const char* d = ::mkdtemp(tmpl)) cold_dir = d;
  }
  const std::string exe = self_path();
  const std::string cache_env = cold_dir.empty() ? "" : "VOLT_KERNEL_CACHE=" + cold_dir + " ";
  const int runs = cold_dir.empty() ? 1 : 2;  // smoke: the user's (warm) cache only
  for (int i = 0; i < runs; ++i) {
    int status = 0;
    const std::string line =
        run_capture(cache_env + "'" + exe + "' --first-call " + std::to_string(batch) +
                        " --first-call-device cpu",
                    &status);
    const bool cold = runs == 2 && i == 0;
    Metric m{"jit_first_call", {},
             std::string(cold ? "cold kernel cache (empty directory)" : "warm kernel cache") +
                 "; jit_ms: the jit's own account of the miss (passes, and the C++ compiler when cold)"};
    if (status != 0 || line.empty()) {
      m.note += "; the measuring process failed";
    } else {
      m.values = {{"batch", double(batch)},
                  {"first_ms", json_number(line, "first_ms")},
                  {"second_ms", json_number(line, "second_ms")},
                  {"jit_ms", json_number(line, "jit_ms")},
                  {"fusions", json_number(line, "fusions")},
                  {"cold", cold ? 1.0 : 0.0}};
    }
    out.push_back(m);
  }
  if (!cold_dir.empty()) {
    std::error_code ec;
    fs::remove_all(cold_dir, ec);
  }
  return out;
}

// The jit's cost per call on a cache hit: a + b on one-element tensors,
// against the same eager op.
Metric measure_call_overhead(const Options& o) {
  Tensor a = Tensor::ones({1}), b = Tensor::full({1}, 2.0);
  auto f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; },
                    {"a", "b"});
  const std::vector<Tensor> args{a, b};
  const int64_t n = o.smoke ? 200 : 20000;
  Tensor sink;
  auto per_call = [&](const std::function<void()>& call) {
    for (int i = 0; i < 100; ++i) call();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {  // the best of 5 runs: the least disturbed
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < n; ++i) call();
      best = std::min(best, us_since(t0) / n);
    }
    return best;
  };
  const double eager_us = per_call([&] { sink = a + b; });
  const double jit_us = per_call([&] { sink = f(args)[0]; });
  VOLT_CHECK(sink.item<double>() == 3.0, "volt_bench", "a + b gave " << sink.item<double>());
  return {"jit_call_overhead", {{"eager_us", eager_us}, {"jit_us", jit_us}, {"overhead_us", jit_us - eager_us}},
          "a + b on 1-element CPU tensors, cache hit"};
}

// Copy bandwidth (bytes read + written per second) with one thread and with all,
// on buffers twice the last-level cache (DRAM) and on buffers that fit in it.
Metric measure_bandwidth(const Options& o) {
  Metric m{"copy_bandwidth", {}, "GB/s counting read + write; dram: 2 x 64 MiB, cache: 2 x 4 MiB"};
  auto run = [&](size_t bytes, bool threads) {
    const size_t n = bytes / sizeof(float);
    std::vector<float> src(n, 1.0f), dst(n, 0.0f);
    float* d = dst.data();
    const float* s = src.data();
    const int reps = o.smoke ? 1 : std::max<int>(3, int((1u << 30) / bytes));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
#pragma omp parallel for schedule(static) if (threads)
      for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) d[i] = s[i];
      best = std::min(best, us_since(t0));
    }
    volatile float keep = dst[n / 2];
    (void)keep;
    return 2.0 * bytes / (best * 1e-6) / 1e9;
  };
  const size_t dram = o.smoke ? (4u << 20) : (64u << 20);
  m.values = {{"dram_1_thread", run(dram, false)},
              {"dram_all_threads", run(dram, true)},
              {"cache_1_thread", run(4u << 20, false)},
              {"cache_all_threads", run(4u << 20, true)}};
  return m;
}

double peak_rss_mb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux reports KiB
}

// The least memory traffic of one training step (bytes), whatever the batch:
// the forward reads every parameter, the backward reads the weights again for
// input gradients (all layers but the first) and writes every gradient, and
// Adam reads p, g, m, v and writes p, m, v.  Activations (small at batch 8) not counted.
double step_min_bytes(const std::shared_ptr<nn::MLP>& net) {
  const auto params = net->parameters();
  double all = 0, first = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    all += params[i].numel();
    if (i < 2) first += params[i].numel();  // 0.weight, 0.bias
  }
  return 4.0 * (all + (all - first) + all + 7 * all);
}

#ifdef VOLT_WITH_CUDA
// The 14 GEMMs of one training step of this model, in cuBLAS alone (FP32):
// 5 forward, 5 weight-gradient and 4 input-gradient products.  Row-major
// C (m, n) = A (m, k) B (k, n) is column-major C^T = B^T A^T.
Metric measure_cublas_floor(int64_t batch, int reps) {
  const int64_t dims[] = {784, 784, 784, 784, 28, 10};
  std::vector<std::pair<std::string, double>> v;
  cuda::DeviceGuard guard(0);
  cublasHandle_t h = cuda::cublas_handle(0);
  cudaStream_t s = cuda::stream(0);
  float *A = nullptr, *B = nullptr, *C = nullptr;
  const size_t big = size_t(std::max<int64_t>(batch, 784)) * 784 * sizeof(float);
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&A), big));
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&B), big));
  VOLT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&C), big));
  VOLT_CUDA_CHECK(cudaMemset(A, 0, big));
  VOLT_CUDA_CHECK(cudaMemset(B, 0, big));
  const float one = 1, zero = 0;
  auto gemm = [&](int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    // Row-major C(m, n) = op(A) op(B); call column-major C^T = op(B)^T op(A)^T.
    VOLT_CUBLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  int(n), int(m), int(k), &one, B, int(tb ? k : n), A,
                                  int(ta ? m : k), &zero, C, int(n)));
  };
  auto step = [&] {
    for (int l = 0; l < 5; ++l) gemm(batch, dims[l + 1], dims[l], false, true);  // x W^T
    for (int l = 0; l < 5; ++l) gemm(dims[l + 1], dims[l], batch, true, false);  // g^T x
    for (int l = 1; l < 5; ++l) gemm(batch, dims[l], dims[l + 1], false, false);  // g W
  };
  VOLT_CUBLAS_CHECK(cublasSetStream(h, s));
  for (int i = 0; i < 3; ++i) step();
  cudaEvent_t e0, e1;
  VOLT_CUDA_CHECK(cudaEventCreate(&e0));
  VOLT_CUDA_CHECK(cudaEventCreate(&e1));
  VOLT_CUDA_CHECK(cudaEventRecord(e0, s));
  for (int i = 0; i < reps; ++i) step();
  VOLT_CUDA_CHECK(cudaEventRecord(e1, s));
  VOLT_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  VOLT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return {"cublas_step_gemms", {{"batch", double(batch)}, {"us", 1e3 * ms / reps}},
          "the 14 FP32 GEMMs of one training step, cuBLAS alone"};
}

Metric measure_cuda_memory() {
  auto s = cuda::memory_stats(0);
  return {"cuda_memory",
          {{"peak_mb", s.peak / 1048576.0}, {"reserved_mb", s.reserved / 1048576.0},
           {"malloc_calls", double(s.malloc_calls)}},
          "caching allocator, device 0, whole run"};
}
#endif

// A baseline on the same cells (bench/libtorch_bench.cpp, bench/pytorch_bench.py),
// run as a child process so that its threads and allocator do not share volt's
// process; it prints one JSON object per line with the keys of a Cell.
std::vector<Cell> run_baseline(const std::string& command, const Options& o) {
  std::string cmd = command + " --json --batch ";
  for (size_t i = 0; i < o.batches.size(); ++i) cmd += (i ? "," : "") + std::to_string(o.batches[i]);
  if (o.steps > 0) cmd += " --steps " + std::to_string(o.steps);
  int status = 0;
  const std::string out = run_capture(cmd, &status);
  std::vector<Cell> cells;
  if (status != 0) {
    std::cerr << "volt_bench: " << command << " failed (status " << status << ")\n";
    return cells;
  }
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    if (line.find("\"median_us\"") == std::string::npos) continue;
    Cell c;
    c.mode = json_string(line, "mode");
    c.device = json_string(line, "device");
    c.phase = json_string(line, "phase");
    c.batch = static_cast<int64_t>(json_number(line, "batch"));
    c.t.steps = static_cast<int64_t>(json_number(line, "steps"));
    c.t.median_us = json_number(line, "median_us");
    c.t.min_us = json_number(line, "min_us");
    cells.push_back(c);
  }
  return cells;
}

// ============================================================ output

void print_json(const std::vector<Cell>& cells, const std::vector<Metric>& metrics) {
  std::printf("[\n");
  bool first = true;
  auto sep = [&] {
    std::printf(first ? "  " : ",\n  ");
    first = false;
  };
  for (const Cell& c : cells) {
    sep();
    std::printf(
        "{\"mode\":\"%s\",\"device\":\"%s\",\"phase\":\"%s\",\"batch\":%lld,\"steps\":%lld,"
        "\"median_us\":%.2f,\"min_us\":%.2f,\"steps_per_s\":%.2f,\"samples_per_s\":%.1f}",
        c.mode.c_str(), c.device.c_str(), c.phase.c_str(), (long long)c.batch, (long long)c.t.steps,
        c.t.median_us, c.t.min_us, c.steps_per_s(), c.samples_per_s());
  }
  for (const Metric& m : metrics) {
    sep();
    std::printf("{\"metric\":\"%s\"", m.name.c_str());
    for (const auto& [k, v] : m.values) std::printf(",\"%s\":%.4g", k.c_str(), std::isfinite(v) ? v : -1.0);
    std::printf(",\"note\":\"%s\"}", m.note.c_str());
  }
  std::printf("\n]\n");
}

const Cell* find_cell(const std::vector<Cell>& cells, const std::string& mode, const std::string& device,
                      const std::string& phase, int64_t batch) {
  for (const Cell& c : cells)
    if (c.mode == mode && c.device == device && c.phase == phase && c.batch == batch) return &c;
  return nullptr;
}

void print_tables(const std::vector<Cell>& cells, const std::vector<Metric>& metrics, const Options& o) {
  std::printf("%-9s %-6s %-6s %6s %7s %12s %12s %11s %13s\n", "mode", "device", "phase", "batch", "steps",
              "median us", "min us", "steps/s", "samples/s");
  for (const Cell& c : cells)
    std::printf("%-9s %-6s %-6s %6lld %7lld %12.1f %12.1f %11.1f %13.0f\n", c.mode.c_str(), c.device.c_str(),
                c.phase.c_str(), (long long)c.batch, (long long)c.t.steps, c.t.median_us, c.t.min_us,
                c.steps_per_s(), c.samples_per_s());

  // Ratios the targets are stated in: jit against eager, volt against LibTorch.
  bool header = false;
  for (const std::string dev : {"cpu", "cuda"})
    for (int64_t b : o.batches) {
      const Cell* e = find_cell(cells, "eager", dev, "train", b);
      const Cell* j = find_cell(cells, "jit", dev, "train", b);
      const Cell* l = find_cell(cells, "lazy", dev, "train", b);
      const Cell* st = find_cell(cells, "step", dev, "train", b);
      const Cell* t = find_cell(cells, "libtorch", dev, "train", b);
      if (!e || (!j && !l && !t && !st)) continue;
      if (!header) {
        std::printf("\ntraining step, speed ratios (steps/s; > 1: the first is faster)\n");
        std::printf("%-6s %6s %10s %11s %15s %15s %15s %10s %15s\n", "device", "batch", "jit/eager", "lazy/eager",
                    "eager/libtorch", "jit/libtorch", "lazy/libtorch", "step/jit", "step/libtorch");
        header = true;
      }
      auto ratio = [](const Cell* a, const Cell* b) {
        return a && b ? a->steps_per_s() / b->steps_per_s() : std::nan("");
      };
      std::printf("%-6s %6lld %10.2f %11.2f %15.2f %15.2f %15.2f %10.2f %15.2f\n", dev.c_str(), (long long)b,
                  ratio(j, e), ratio(l, e), ratio(e, t), ratio(j, t), ratio(l, t), ratio(st, j), ratio(st, t));
    }

  if (!metrics.empty()) std::printf("\n");
  for (const Metric& m : metrics) {
    std::printf("%-20s", m.name.c_str());
    for (const auto& [k, v] : m.values) std::printf(" %s=%.4g", k.c_str(), v);
    if (!m.note.empty()) std::printf("  (%s)", m.note.c_str());
    std::printf("\n");
  }
}

// The machine's FMA peak with one and with all threads, and the seed model's
// GEMMs at each batch as a fraction of the peak for the threads they use.
void add_cpu_figures(const Options& o, std::vector<Metric>& metrics) {
  const int threads = cpu::num_threads();
  const double peak1 = bench_cpu::fma_peak_gflops(1), peak = bench_cpu::fma_peak_gflops(threads);
  metrics.push_back({"fma_peak",
                     {{"threads", 1.0}, {"gflops", peak1}},
                     std::string("register-only FMA loop, ") + cpu::isa_name(cpu::isa()) + " vectors"});
  if (threads > 1)
    metrics.push_back({"fma_peak", {{"threads", double(threads)}, {"gflops", peak}}, "all threads at once"});
  for (int64_t batch : o.batches)
    for (auto& f : bench_cpu::gemm_shapes(batch, peak)) metrics.push_back({f.name, f.values, f.note});
  for (int64_t batch : o.batches) {
    const bench_cpu::Figure f = bench_cpu::fused_linear_layer(batch);
    metrics.push_back({f.name, f.values, f.note});
  }
}

// --model cnn: the CPU training step of the tutorial's CNN, and LibTorch's when built.
int run_cnn(const Options& o) {
  bench_cnn::Options c;
  c.modes = o.modes;
  c.batches = o.batches_given ? o.batches : std::vector<int64_t>{64};
  c.steps = o.steps;
  c.warmup = o.warmup;
  c.threads = cpu::num_threads();
  c.json = o.json;
  if (std::find(o.devices.begin(), o.devices.end(), "cpu") == o.devices.end())
    usage_error("--model cnn runs on the cpu only");
  if (!o.no_libtorch) {
    std::string path = o.libtorch;
    if (path.empty()) path = (std::filesystem::path(self_path()).parent_path() / "libtorch_bench").string();
    if (::access(path.c_str(), X_OK) == 0) c.libtorch = path;
    else if (!o.libtorch.empty()) usage_error("--libtorch: cannot run " + o.libtorch);
  }
  return bench_cnn::run(c);
}

}  // namespace

int main(int argc, char** argv) {
  if (bench_dist::wanted(argc, argv)) return bench_dist::run(argc, argv);  // under mpirun (bench/distributed.cpp)
  const Options o = parse_args(argc, argv);
  try {
    if (o.threads > 0) cpu::set_num_threads(o.threads);
    if (o.first_call_batch > 0) return first_call_child(o);
    if (o.model == "cnn") return run_cnn(o);

    std::vector<Device> devices;
    for (const auto& d : o.devices) {
      if (d == "cuda" && !cuda_usable()) {
        if (!o.json) std::fprintf(stderr, "volt_bench: cuda skipped (no CUDA backend or no usable GPU here)\n");
        continue;
      }
      devices.push_back(Device::parse(d));
    }

    std::vector<Metric> metrics;
    // First-call compile times before anything else, in fresh processes.
    if (o.extras && std::find(o.modes.begin(), o.modes.end(), "jit") != o.modes.end())
      for (auto& m : measure_first_call(o)) metrics.push_back(m);

    std::unique_ptr<data::MNIST> mnist;
    if (!o.data_dir.empty()) mnist = std::make_unique<data::MNIST>(o.data_dir, /*train=*/true);

    std::vector<Cell> cells;
    for (Device device : devices)
      for (int64_t batch : o.batches) {
        auto batches = mnist ? mnist_batches(*mnist, batch, device) : synthetic_batches(batch, device);
        for (const auto& mode : o.modes) {
          if (!o.json) std::fprintf(stderr, "volt_bench: %s %s batch %lld\n", mode.c_str(),
                                    device.str().c_str(), (long long)batch);
          for (Cell& c : run_cell(mode, device, batch, batches, o, metrics)) cells.push_back(c);
        }
      }

    // LibTorch, when built (cmake -DVOLT_BENCH_LIBTORCH=ON) and on the CPU (Debian's is CPU-only).
    const bool cpu_asked = std::find(o.devices.begin(), o.devices.end(), "cpu") != o.devices.end();
    if (!o.no_libtorch && cpu_asked) {
      std::string path = o.libtorch;
      if (path.empty()) path = (std::filesystem::path(self_path()).parent_path() / "libtorch_bench").string();
      if (::access(path.c_str(), X_OK) == 0) {
        if (!o.json) std::fprintf(stderr, "volt_bench: running %s\n", path.c_str());
        std::string cmd = "'" + path + "'";
        if (!o.eval) cmd += " --no-eval";
        cmd += " --threads " + std::to_string(cpu::num_threads());
        for (Cell& c : run_baseline(cmd, o)) cells.push_back(c);
      } else if (!o.libtorch.empty()) {
        usage_error("--libtorch: cannot run " + o.libtorch);
      }
    }
    if (!o.pytorch.empty() && cpu_asked) {
      const char* py = std::getenv("VOLT_PYTHON");
      if (!o.json) std::fprintf(stderr, "volt_bench: running %s\n", o.pytorch.c_str());
      for (Cell& c : run_baseline(std::string(py ? py : "/usr/bin/python3") + " '" + o.pytorch + "'", o))
        cells.push_back(c);
    }

    if (o.extras) {
      metrics.push_back(measure_call_overhead(o));
      Metric bw = measure_bandwidth(o);
      metrics.push_back(bw);
      // How close the memory-bound batch-8 step runs to the copy bandwidth.
      for (const std::string& mode : kModes)
        if (const Cell* c = find_cell(cells, mode, "cpu", "train", 8)) {
          const double bytes = step_min_bytes(make_model(kCPU));
          const double gbs = bytes / (c->t.median_us * 1e-6) / 1e9;
          // The better of the one- and all-thread copies: on a busy machine threads can lose.
          const double copy_gbs = std::max(bw.values[0].second, bw.values[1].second);
          const double cache_gbs = std::max(bw.values[2].second, bw.values[3].second);
          metrics.push_back({"step_bandwidth",
                             {{"batch", 8.0}, {"min_traffic_mb", bytes / 1e6}, {"achieved_gbs", gbs},
                              {"fraction_of_dram_copy", gbs / copy_gbs},
                              {"fraction_of_cache_copy", gbs / cache_gbs}},
                             mode + " training step, cpu; least traffic / median time, against the copy "
                                    "bandwidth from DRAM and from cache"});
        }
#ifdef VOLT_WITH_CUDA
      for (Device d : devices)
        if (d.is_cuda()) {
          metrics.push_back(measure_cuda_memory());
          for (int64_t b : o.batches) metrics.push_back(measure_cublas_floor(b, o.smoke ? 2 : 50));
        }
#endif
      if (cpu_asked && !o.smoke) add_cpu_figures(o, metrics);
      metrics.push_back({"peak_rss", {{"mb", peak_rss_mb()}}, "host, whole run"});
    }

    if (cpu_asked && o.busy) {
      Options busy_o = o;
      busy_o.eval = false;
      std::vector<Metric> unused;
      auto batches = synthetic_batches(64, kCPU);
      auto cell = [&] { return run_cell("eager", kCPU, 64, batches, busy_o, unused)[0].steps_per_s(); };
      for (auto& f : bench_cpu::busy_machine("eager training step, cpu, batch 64", 2, o.smoke ? 1 : 5, cell))
        metrics.push_back({f.name, f.values, f.note});
    }
    if (o.epoch)
      for (int64_t batch : o.batches)
        for (const auto& mode : o.modes)
          if (mode == "eager" || mode == "jit" || mode == "step") {
            auto f = bench_cpu::mnist_epoch(o.data_dir, mode, batch);
            metrics.push_back({f.name, f.values, f.note});
          }

    if (o.json) print_json(cells, metrics);
    else print_tables(cells, metrics, o);
    return 0;
  } catch (const Error& e) {
    std::cerr << "volt_bench: " << e.what() << "\n";
    return 1;
  }
}
