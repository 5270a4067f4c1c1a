// volt_bench --model attention (see attention_bench.h).  One call is
// out = attention(q, k, v) and out.backward(g): the three input gradients exist
// when it returns.
#include "attention_bench.h"

#include <cstdio>
#include <functional>
#include <string>

#include "common.h"
#include <volt/jit/flash_attention.h>
#include <volt/jit/jit.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/memory_stats.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace bench_attention {
namespace {

using namespace volt;

constexpr int64_t kBatch = 16, kHeads = 4, kHeadDim = 32;

struct Cell {
  std::string path;
  int64_t T = 0;
  bench::Timing t;
  double allocated_mib = 0, peak_mib = 0;  // per call: storage allocated; the most held at once beyond the inputs
};

using Attention = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;

Cell measure(const std::string& path, int64_t T, const Attention& f, const Options& o) {
  manual_seed(0);
  const Shape s{kBatch, kHeads, T, kHeadDim};
  Tensor q = Tensor::randn(s).requires_grad_(), k = Tensor::randn(s).requires_grad_(),
         v = Tensor::randn(s).requires_grad_(), g = Tensor::randn(s);
  auto clear = [&] {
    for (Tensor* t : {&q, &k, &v}) t->impl()->grad.reset();
  };
  auto call = [&] {
    clear();
    f(q, k, v).backward(g);
  };
  const int64_t steps = o.steps > 0 ? o.steps : T >= 2048 ? 2 : T >= 512 ? 5 : 20;
  Cell c;
  c.path = path;
  c.T = T;
  c.t = bench::time_steps(call, steps, o.warmup < 0 ? 1 : o.warmup);
  // One more call from a clean state (no gradients held), its storage counted.
  clear();
  const StorageBytes before = storage_bytes();
  reset_storage_peak();
  f(q, k, v).backward(g);
  const StorageBytes after = storage_bytes();
  constexpr double kMiB = 1024.0 * 1024.0;
  c.allocated_mib = double(after.allocated - before.allocated) / kMiB;
  c.peak_mib = double(after.peak_live - before.live) / kMiB;
  return c;
}

}  // namespace

int run(const Options& o) {
  const AttentionOptions causal{.causal = true, .scale = std::nullopt, .dropout_p = 0};
  auto direct = [causal](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, causal);
  };
  jit::JitFunction flash = jit::jit([causal](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{scaled_dot_product_attention(a[0], a[1], a[2], causal)};
  });
  jit::remove_default_executor(jit::flash_executor());
  jit::JitFunction plain = jit::jit([causal](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{scaled_dot_product_attention(a[0], a[1], a[2], causal)};
  });
  jit::add_default_executor(jit::flash_executor());
  std::vector<Cell> cells;
  for (int64_t T : o.lengths) {
    cells.push_back(measure("eager (decomposed)", T, direct, o));
    cells.push_back(measure("jit without flash", T, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return plain({q, k, v}).at(0);
    }, o));
    cells.push_back(measure("jit, flash", T, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return flash({q, k, v}).at(0);
    }, o));
    const Cell& f = cells.back();
    for (size_t i = cells.size() - 3; i < cells.size(); ++i) {
      const Cell& c = cells[i];
      if (o.json)
        std::printf("{\"model\":\"attention\",\"path\":\"%s\",\"T\":%lld,\"median_ms\":%.3f,\"min_ms\":%.3f,"
                    "\"allocated_mib\":%.1f,\"peak_mib\":%.1f}\n",
                    c.path.c_str(), static_cast<long long>(T), c.t.median_us / 1e3, c.t.min_us / 1e3,
                    c.allocated_mib, c.peak_mib);
      else
        std::printf("T=%-5lld %-20s %10.2f ms  (x%.2f of flash)  allocated %9.1f MiB  peak %9.1f MiB\n",
                    static_cast<long long>(T), c.path.c_str(), c.t.median_us / 1e3, c.t.median_us / f.t.median_us,
                    c.allocated_mib, c.peak_mib);
    }
  }
  if (!o.json)
    std::printf("attention forward+backward, cpu f32, batch %lld, %lld heads, head_dim %lld, causal, %d threads\n",
                static_cast<long long>(kBatch), static_cast<long long>(kHeads), static_cast<long long>(kHeadDim),
                cpu::num_threads());
  return 0;
}

}  // namespace bench_attention
