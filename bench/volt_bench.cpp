// volt_bench: how fast volt trains and evaluates the seed model, eager and jit,
// on the CPU (and CUDA when this build and machine have it), batch 8 to 1024.
//
//   volt_bench                              # the whole matrix, a human table
//   volt_bench --mode jit --batch 8,256     # some cells
//   volt_bench --json > result.json         # one JSON array
//   volt_bench --steps 2 --smoke            # every cell once, quickly (./test.sh)
//   volt_bench --model cnn                  # the MNIST CNN instead (bench/cnn_workload.h)
//   volt_bench --model gpt                  # examples/gpt's GPT instead (bench/gpt_workload.h)
//   volt_bench --model attention            # flash attention against its decomposition (bench/attention_bench.h)
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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attention_bench.h"
#include "cnn_workload.h"
#include "gpt_workload.h"
#include "common.h"
#include "cpu_figures.h"
#include "distributed.h"
#include "extra_figures.h"
#include "options.h"
#include "workload.h"
#include <volt/data/dataset.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/runtime.h>
#endif

using namespace volt;
using namespace volt::benchmark;
using bench::Clock;
using bench::time_steps;
using bench::Timing;
using bench::us_since;

namespace {

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


// Times training and (optionally) evaluation of one mode/device/batch on a fresh model.
// On CUDA it also counts the kernel launches and cuBLAS calls of one more
// training step, into `metrics`.
std::vector<Cell> run_cell(const std::string& mode, Device device, int64_t batch,
                           const std::vector<Batch>& held, const Options& o, std::vector<Metric>& metrics) {
  auto net = make_model(device);
  net->train();
  // "jit+bf16": the jit cell with autocast to bf16 (forward, loss and evaluation).
  const std::string base = mode.substr(0, mode.find('+'));
  std::optional<DType> amp;
  if (base != mode) amp = mode.substr(base.size() + 1) == "f16" ? kF16 : kBF16;
  Runner r = make_runner(base, net, device);
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
    AutocastGuard mixed(amp);
    Tensor loss = loss_fn(r.train(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  // step: the same body, compiled once into one planned program.
  std::unique_ptr<jit::CompiledStep> compiled;
  if (base == "step")
    compiled = std::make_unique<jit::CompiledStep>(
        jit::compile_step(body, {.state = {*net, opt}, .reuse_outputs = true, .autocast = amp}));
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
    // The steps alone, without the wait that ends a timed step (a lazy step
    // still runs its graph: mark_step, without wait_device_ops).
    for (int i = 0; i < kCounted; ++i) {
      const Batch& b = batches[k++ % batches.size()];
      // The loss is held through mark_step, as a timed step holds it (a lazy
      // step whose loss is dropped first is another graph, without the loss).
      const Tensor loss = compiled ? (*compiled)(b.x, b.y) : body(b.x, b.y);
      if (base == "lazy") lazy::mark_step();
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
      AutocastGuard mixed(amp);
      r.finish(r.eval(b.x));
    };
    cells.push_back({mode, dev, "eval", batch, time_steps(eval_step, o.steps, o.warmup)});
  }
  return cells;
}

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
  std::printf("%-13s %-6s %-6s %6s %7s %12s %12s %11s %13s\n", "mode", "device", "phase", "batch", "steps",
              "median us", "min us", "steps/s", "samples/s");
  for (const Cell& c : cells)
    std::printf("%-13s %-6s %-6s %6lld %7lld %12.1f %12.1f %11.1f %13.0f\n", c.mode.c_str(), c.device.c_str(),
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
  // The bf16 GEMM at 1024^3 against the vdpbf16ps and the AMX peaks, 1 and all threads.
  for (int t : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1}) {
    const double bf16_peak = bench_cpu::bf16_dot_peak_gflops(t), amx_peak = bench_cpu::amx_bf16_peak_gflops(t);
    metrics.push_back({"bf16_dot_peak", {{"threads", double(t)}, {"gflops", bf16_peak}}, "register-only vdpbf16ps loop"});
    if (amx_peak > 0)
      metrics.push_back({"amx_bf16_peak", {{"threads", double(t)}, {"gflops", amx_peak}}, "tile-only AMX tdpbf16ps loop"});
    const bench_cpu::Figure f = bench_cpu::bf16_gemm(1024, t, bf16_peak, amx_peak);
    metrics.push_back({f.name, f.values, f.note});
  }
  for (int64_t batch : o.batches) {
    const bench_cpu::Figure f = bench_cpu::fused_linear_layer(batch);
    metrics.push_back({f.name, f.values, f.note});
  }
}

// --model bf16gemm: the bf16 GEMM's figures alone (those of the CPU figures,
// in seconds rather than minutes), then the GEMM at the GPT's linear layers
// (batch 16 x block 128 rows, width 128) and the MLP's (784 -> 784 at batch
// 256 and 1024) on all threads.
int run_bf16_gemm(const Options& o) {
  std::vector<Metric> metrics;
  const int threads = cpu::num_threads();
  double amx_peak = 0;
  for (int t : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1}) {
    const double bf16_peak = bench_cpu::bf16_dot_peak_gflops(t);
    amx_peak = bench_cpu::amx_bf16_peak_gflops(t);
    metrics.push_back({"bf16_dot_peak", {{"threads", double(t)}, {"gflops", bf16_peak}}, "register-only vdpbf16ps loop"});
    if (amx_peak > 0)
      metrics.push_back({"amx_bf16_peak", {{"threads", double(t)}, {"gflops", amx_peak}}, "tile-only AMX tdpbf16ps loop"});
    const bench_cpu::Figure f = bench_cpu::bf16_gemm(1024, t, bf16_peak, amx_peak);
    metrics.push_back({f.name, f.values, f.note});
  }
  struct Shape {
    const char* what;
    int64_t m, k, n;
    const char* layout;
  };
  const Shape shapes[] = {
      {"gpt qkv", 2048, 128, 384, "x W^T"},         {"gpt fc", 2048, 128, 512, "x W^T"},
      {"gpt fc proj", 2048, 512, 128, "x W^T"},     {"gpt lm head", 2048, 128, 256, "x W^T"},
      {"gpt fc input grad", 2048, 512, 128, "g W"}, {"gpt fc weight grad", 512, 2048, 128, "g^T x"},
      {"gpt qkv weight grad", 384, 2048, 128, "g^T x"},
      {"mlp 784x784 b256", 256, 784, 784, "x W^T"}, {"mlp 784x784 b1024", 1024, 784, 784, "x W^T"},
      {"mlp 784x784 b1024 input grad", 1024, 784, 784, "g W"},
      {"mlp 784x784 b1024 weight grad", 784, 1024, 784, "g^T x"}};
  for (const Shape& s : shapes) {
    const bench_cpu::Figure f = bench_cpu::bf16_gemm_shape(s.what, s.m, s.k, s.n, s.layout, amx_peak);
    metrics.push_back({f.name, f.values, f.note});
  }
  if (o.json) return print_json({}, metrics), 0;
  for (const Metric& m : metrics) {
    std::printf("%-20s", m.name.c_str());
    for (const auto& [k, v] : m.values) std::printf(" %s=%.4g", k.c_str(), v);
    std::printf("  (%s)\n", m.note.c_str());
  }
  return 0;
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

// --model gpt: training steps of examples/gpt's model, and LibTorch's when built.
int run_gpt(const Options& o) {
  bench_gpt::Options g;
  g.modes = o.modes;
  g.devices = o.devices;
  g.batch = o.batches_given ? o.batches.at(0) : 16;
  g.steps = o.steps;
  g.warmup = o.warmup;
  g.threads = cpu::num_threads();
  g.json = o.json;
  g.amp = o.amp;
  g.amp_only = o.amp_only;
  if (!o.no_libtorch) {
    std::string path = o.libtorch;
    if (path.empty()) path = (std::filesystem::path(self_path()).parent_path() / "libtorch_bench").string();
    if (::access(path.c_str(), X_OK) == 0) g.libtorch = path;
    else if (!o.libtorch.empty()) usage_error("--libtorch: cannot run " + o.libtorch);
  }
  return bench_gpt::run(g);
}

}  // namespace

int main(int argc, char** argv) {
  if (bench_dist::wanted(argc, argv)) return bench_dist::run(argc, argv);  // under mpirun (bench/distributed.cpp)
  const Options o = parse_args(argc, argv);
  try {
    if (o.threads > 0) cpu::set_num_threads(o.threads);
    if (o.first_call_batch > 0) return first_call_child(o);
    if (o.model == "cnn") return run_cnn(o);
    if (o.model == "gpt") return run_gpt(o);
    if (o.model == "bf16gemm") return run_bf16_gemm(o);
    if (o.model == "attention") {
      bench_attention::Options a;
      if (o.batches_given) a.lengths = o.batches;
      a.steps = o.steps;
      a.warmup = o.warmup;
      a.json = o.json;
      return bench_attention::run(a);
    }

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
          if (!o.amp_only) {
            if (!o.json) std::fprintf(stderr, "volt_bench: %s %s batch %lld\n", mode.c_str(),
                                      device.str().c_str(), (long long)batch);
            for (Cell& c : run_cell(mode, device, batch, batches, o, metrics)) cells.push_back(c);
          }
          if (o.amp.empty()) continue;
          if (!o.json) std::fprintf(stderr, "volt_bench: %s+%s %s batch %lld\n", mode.c_str(), o.amp.c_str(),
                                    device.str().c_str(), (long long)batch);
          for (Cell& c : run_cell(mode + "+" + o.amp, device, batch, batches, o, metrics)) cells.push_back(c);
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
        if (!o.amp_only)
          for (Cell& c : run_baseline(cmd, o)) cells.push_back(c);
        // LibTorch's CPU autocast (at::autocast::set_cpu_enabled) takes bf16 only.
        if (o.amp == "bf16")
          for (Cell& c : run_baseline(cmd + " --amp bf16", o)) cells.push_back(c);
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
