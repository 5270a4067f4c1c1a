// volt_bench --model gpt (see gpt_workload.h).  A training step is forward,
// cross-entropy, zero_grad, backward, clip_grad_norm_ and AdamW's step, as
// examples/gpt runs it; every mode's time is the time until the updated
// parameters exist (the lazy step waits for its graph, a GPU step synchronises).
#include "gpt_workload.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include "common.h"
#include "workload.h"
#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/gpt.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace bench_gpt {
namespace {

using namespace volt;
using volt::benchmark::child_output_lines;
using volt::benchmark::json_field;

struct Cell {
  std::string mode, device;
  int64_t batch = 0, block = 0;
  bench::Timing t;
  double tokens_per_s() const { return t.median_us > 0 ? 1e6 / t.median_us * double(batch * block) : 0; }
};

struct Batch {
  Tensor x, y;  // (B, T) i64: random printable bytes and the next ones
};

std::vector<Batch> synthetic_windows(int64_t batch, int64_t block, Device device) {
  std::mt19937_64 rng(1);
  std::vector<Batch> out;
  for (int k = 0; k < bench::kBatchesHeld; ++k) {
    std::vector<int64_t> x(batch * block), y(batch * block);
    for (int64_t r = 0; r < batch; ++r) {
      int64_t prev = 32 + rng() % 95;
      for (int64_t t = 0; t < block; ++t) {
        const int64_t next = 32 + rng() % 95;
        x[r * block + t] = prev;
        y[r * block + t] = next;
        prev = next;
      }
    }
    out.push_back({Tensor::from_vector(x, {batch, block}).to(device), Tensor::from_vector(y, {batch, block}).to(device)});
  }
  return out;
}

// What a trace that runs launches: its fused regions (row regions among
// them), and every other op that is not a view (GEMMs, copies, eager prims).
struct KernelCount {
  int regions = 0, row_regions = 0, others = 0;
  double region_bytes = 0;  // what the fused regions read and write: each input and output once
  void add(const jit::Trace& t) {
    for (const jit::BoundSymbol& b : t.bsyms) {
      if (b.is_fusion()) {
        ++regions;
        row_regions += jit::is_row_region(b) ? 1 : 0;
        for (const auto* list : {&b.fusion_inputs, &b.outputs})
          for (const Tensor& v : *list) region_bytes += double(v.numel()) * double(dtype_size(v.dtype()));
      } else if (b.call.op == OpId::custom || op_info(b.call.op).kind != OpKind::View) {
        ++others;
      }
    }
  }
  void print(const std::string& mode) const {
    std::fprintf(stderr, "volt_bench: gpt %s: %d kernels per step: %d fused regions (%d row regions), %d other ops\n",
                 mode.c_str(), regions + others, regions, row_regions, others);
    // On paper: the regions' traffic at an H100's 3 TB/s of HBM.
    std::fprintf(stderr, "volt_bench: gpt %s: the fused regions move %.1f MB per step (%.0f us at 3 TB/s, on paper)\n",
                 mode.c_str(), region_bytes / 1e6, region_bytes / 3e12 * 1e6);
  }
};

Cell run_cell(const std::string& full_mode, const std::string& device_name, const Options& o) {
  // "jit+bf16": the jit cell with autocast to bf16.
  const std::string mode = full_mode.substr(0, full_mode.find('+'));
  std::optional<DType> amp;
  if (mode != full_mode) amp = full_mode.substr(mode.size() + 1) == "f16" ? kF16 : kBF16;
  manual_seed(1);
  auto gpt = std::make_shared<nn::GPT>(nn::GPTConfig{});
  gpt->train();
  Device device = device_name == "cuda" ? Device::cuda(0) : kCPU;
  if (mode == "lazy") {
    lazy::set_backend(device);
    device = kLazy;
  }
  gpt->to(device);
  const int64_t block = gpt->config().block_size;
  const std::vector<Batch> batches = synthetic_windows(o.batch, block, device);
  nn::AdamW opt(nn::weight_decay_groups(gpt->parameters(), 0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});
  std::function<Tensor(const Tensor&, const Tensor&)> loss_of = [gpt](const Tensor& x, const Tensor& y) {
    return gpt->forward(x, y).loss;
  };
  std::shared_ptr<jit::JitFunction> f;
  if (mode == "jit") {
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (auto& [n, p] : gpt->named_parameters()) {
      params.push_back(p);
      names.push_back(jit::proxy_name_for(n));
    }
    f = std::make_shared<jit::JitFunction>(
        [gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
        std::vector<std::string>{"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); });
    loss_of = [f](const Tensor& x, const Tensor& y) { return (*f)({x, y}).at(0); };
  }
  auto body = [&](const Tensor& x, const Tensor& y) {
    AutocastGuard mixed(amp);
    Tensor loss = loss_of(x, y);
    opt.zero_grad();
    loss.backward();
    nn::utils::clip_grad_norm_(gpt->parameters(), 1.0);
    opt.step();
    return loss;
  };
  std::unique_ptr<jit::CompiledStep> compiled;
  if (mode == "step")
    compiled = std::make_unique<jit::CompiledStep>(jit::compile_step(body, {.state = {*gpt, opt}, .reuse_outputs = true, .autocast = amp}));
  size_t k = 0;
  auto train_step = [&] {
    const Batch& b = batches[k++ % batches.size()];
    Tensor loss = compiled ? (*compiled)(b.x, b.y) : body(b.x, b.y);  // held over mark_step
    if (mode == "lazy") {
      lazy::mark_step();
      lazy::wait_device_ops();
    }
    if (device_name == "cuda") cuda::synchronize(0);
  };
  train_step();  // the first step compiles (jit, step, lazy)
  if (mode == "step") train_step();  // the second captures the CUDA graph
  if (!o.json && (f || compiled)) {
    KernelCount count;
    if (f) count.add(f->last_traces().back());
    if (f) count.add(f->last_backward_traces().back());
    if (compiled) count.add(compiled->last_traces().back());
    count.print(full_mode);
  }
  return {full_mode, device_name, o.batch, block, bench::time_steps(train_step, o.steps, o.warmup)};
}

// libtorch_bench --model gpt, as a child process (its own threads and allocator).
std::vector<Cell> run_libtorch(const Options& o, bool bf16) {
  std::string cmd = "'" + o.libtorch + "' --model gpt --json --batch " + std::to_string(o.batch);
  if (bf16) cmd += " --amp bf16";
  if (o.steps > 0) cmd += " --steps " + std::to_string(o.steps);
  if (o.threads > 0) cmd += " --threads " + std::to_string(o.threads);
  std::vector<Cell> cells;
  for (const std::string& line : child_output_lines(cmd)) {
    if (json_field(line, "model") != "gpt" || json_field(line, "phase") != "train") continue;
    Cell c{bf16 ? "libtorch+bf16" : "libtorch", "cpu", std::stoll(json_field(line, "batch")), 0, {}};
    c.t.steps = std::stoll(json_field(line, "steps"));
    c.t.median_us = std::stod(json_field(line, "median_us"));
    c.t.min_us = std::stod(json_field(line, "min_us"));
    const double tokens = std::stod(json_field(line, "tokens_per_s"));
    c.block = tokens > 0 ? std::llround(tokens * c.t.median_us / 1e6 / double(c.batch)) : 128;
    cells.push_back(c);
  }
  return cells;
}

}  // namespace

int run(const Options& o) {
  std::vector<Cell> cells;
  for (const std::string& device : o.devices)
    for (const std::string& mode : o.modes) {
      if (device == "cuda" && (!cuda::is_available() || mode == "lazy")) continue;  // the lazy cell: cpu only
      if (!o.amp_only) {
        if (!o.json) std::fprintf(stderr, "volt_bench: gpt %s %s batch %lld\n", mode.c_str(), device.c_str(), (long long)o.batch);
        cells.push_back(run_cell(mode, device, o));
      }
      if (o.amp.empty()) continue;
      if (!o.json) std::fprintf(stderr, "volt_bench: gpt %s+%s %s batch %lld\n", mode.c_str(), o.amp.c_str(), device.c_str(), (long long)o.batch);
      cells.push_back(run_cell(mode + "+" + o.amp, device, o));
    }
  if (!o.libtorch.empty()) {
    if (!o.json) std::fprintf(stderr, "volt_bench: running %s --model gpt\n", o.libtorch.c_str());
    if (!o.amp_only)
      for (const Cell& c : run_libtorch(o, false)) cells.push_back(c);
    if (o.amp == "bf16")  // LibTorch's CPU autocast takes bf16 only
      for (const Cell& c : run_libtorch(o, true)) cells.push_back(c);
  }
  if (o.json) {
    for (const Cell& c : cells)
      std::printf(
          "{\"model\":\"gpt\",\"mode\":\"%s\",\"device\":\"%s\",\"phase\":\"train\",\"batch\":%lld,"
          "\"steps\":%lld,\"median_us\":%.2f,\"min_us\":%.2f,\"tokens_per_s\":%.1f}\n",
          c.mode.c_str(), c.device.c_str(), (long long)c.batch, (long long)c.t.steps, c.t.median_us, c.t.min_us,
          c.tokens_per_s());
    return 0;
  }
  std::printf("GPT (vocab 256, block 128, 4 layers, 4 heads, width 128), AdamW, clipping; training step\n");
  std::printf("%-13s %-5s %6s %7s %12s %12s %12s %10s\n", "mode", "dev", "batch", "steps", "median us", "min us",
              "tokens/s", "/libtorch");
  const Cell* base = nullptr;
  for (const Cell& t : cells)
    if (t.mode == "libtorch") base = &t;
  for (const Cell& c : cells) {
    const double ratio = base && c.device == "cpu" ? c.tokens_per_s() / base->tokens_per_s() : std::nan("");
    std::printf("%-13s %-5s %6lld %7lld %12.1f %12.1f %12.0f %10.2f\n", c.mode.c_str(), c.device.c_str(),
                (long long)c.batch, (long long)c.t.steps, c.t.median_us, c.t.min_us, c.tokens_per_s(), ratio);
  }
  return 0;
}

}  // namespace bench_gpt
