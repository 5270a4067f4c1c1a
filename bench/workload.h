// The seed model and its batches as volt_bench holds them (bench/workload.cpp),
// and the two kinds of figure it reports: a cell of the matrix, a metric.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include <volt/data/dataset.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/tensor.h>

namespace volt::benchmark {

// MLP(784, [784, 784, 784, 28, 10], dropout 0.1), seeded, on `device`.
std::shared_ptr<nn::MLP> make_model(Device device);

struct Batch {
  Tensor x, y;  // x: (B, 784) f32, y: (B) i64
};

// Synthetic batches: bench::synthetic_batch, the same numbers libtorch_bench uses.
std::vector<Batch> synthetic_batches(int64_t batch, Device device);
// The first kBatchesHeld * batch training images, in order.
std::vector<Batch> mnist_batches(const data::MNIST& set, int64_t batch, Device device);

void synchronize(Device device);
bool cuda_usable();

// A baseline binary run as a child process (its own threads and allocator):
// its standard output by lines, or nothing (said on stderr) when it failed.
std::vector<std::string> child_output_lines(const std::string& command);
// The value of "key" in one line of JSON ({"key": 1.5, "k2": "text"}), as text; "" when absent.
std::string json_field(const std::string& line, const std::string& key);

// A figure that is not a matrix cell: {"metric": name, key: value, ...}.
struct Metric {
  std::string name;
  std::vector<std::pair<std::string, double>> values;
  std::string note;
};

struct Cell {
  std::string mode, device, phase;  // phase: train or eval
  int64_t batch = 0;
  bench::Timing t;
  double steps_per_s() const { return t.median_us > 0 ? 1e6 / t.median_us : 0; }
  double samples_per_s() const { return steps_per_s() * batch; }
};

}  // namespace volt::benchmark
