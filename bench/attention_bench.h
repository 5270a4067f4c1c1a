// volt_bench --model attention: scaled_dot_product_attention forward and
// backward on the CPU (batch 16, 4 heads, head_dim 32, causal, T = 128, 512,
// 2048 unless --batch gives the T's), by the flash executor and by the
// decomposition (eagerly, and jitted without flash): time per call and the
// bytes of tensor storage each call allocates and holds at its peak.
#pragma once
#include <cstdint>
#include <vector>

namespace bench_attention {

struct Options {
  std::vector<int64_t> lengths = {128, 512, 2048};
  int64_t steps = 0;    // timed calls per cell; 0: a few, fewer for long T
  int64_t warmup = -1;  // -1: one
  bool json = false;
};

int run(const Options& o);

}  // namespace bench_attention
