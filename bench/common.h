// What both benchmark binaries share (volt_bench and its LibTorch baseline),
// so that their figures mean the same thing: the workload's sizes, the
// synthetic batches, and the timing rule (a warm-up, then single steps timed
// with a steady clock, summarised by their median and minimum).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

constexpr int64_t kFeatures = 784, kClasses = 10;
constexpr int kBatchesHeld = 8;  // distinct batches per cell, cycled

// Synthetic batch k of `batch` samples: std::mt19937 with a fixed seed per k,
// so every binary trains on the very same numbers.  Pixels are uniform in
// [0, 1) like MNIST's range.
struct RawBatch {
  std::vector<float> x;    // batch x kFeatures, row-major
  std::vector<int64_t> y;  // batch labels
};
inline RawBatch synthetic_batch(int64_t batch, int k) {
  std::mt19937 gen(1000 + k);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, kClasses - 1);
  RawBatch b;
  b.x.resize(static_cast<size_t>(batch * kFeatures));
  b.y.resize(static_cast<size_t>(batch));
  for (float& v : b.x) v = pixel(gen);
  for (int64_t& v : b.y) v = label(gen);
  return b;
}

inline double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Timing {
  int64_t steps = 0;
  double median_us = 0, min_us = 0;
};

inline Timing summarize(std::vector<double> us) {
  Timing t;
  t.steps = static_cast<int64_t>(us.size());
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  t.min_us = us.front();
  const size_t n = us.size();
  t.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  return t;
}

// Runs step() for warm-up, then times it: exactly `steps` times when given,
// else at least 20 times and 1 s, and until the median of the second half
// agrees with the whole run's within 2 % (at most 3000 steps or 10 s).
// warmup < 0: about 0.2 s of untimed steps (3 to 50); else that many.
inline Timing time_steps(const std::function<void()>& step, int64_t steps, int64_t warmup = -1) {
  const auto w0 = Clock::now();
  if (warmup < 0) {
    int64_t done = 0;
    while (done < 3 || (done < 50 && us_since(w0) < 2e5)) step(), ++done;
  } else {
    for (int64_t i = 0; i < warmup; ++i) step();
  }
  std::vector<double> us;
  const auto t0 = Clock::now();
  for (;;) {
    if (steps > 0 && static_cast<int64_t>(us.size()) >= steps) break;
    if (steps <= 0 && us.size() >= 20 && us_since(t0) > 1e6) {
      const double all = summarize(us).median_us;
      const double late = summarize({us.begin() + us.size() / 2, us.end()}).median_us;
      if (std::abs(late - all) <= 0.02 * all || us.size() >= 3000 || us_since(t0) > 1e7) break;
    }
    const auto s0 = Clock::now();
    step();
    us.push_back(us_since(s0));
  }
  return summarize(us);
}

}  // namespace bench
