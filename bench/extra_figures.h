// volt_bench's figures besides the matrix (bench/extra_figures.cpp): the jit's
// first call with a cold and a warm kernel cache (each in a fresh process),
// its cost per call on a cache hit, the machine's copy bandwidth, peak host
// RSS, a training step's least memory traffic, and on CUDA the step's GEMMs
// in cuBLAS alone and the caching allocator's figures.  Also the small tools
// for running a child process and reading the one-line JSON it prints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "options.h"
#include "workload.h"
#include <volt/nn/mlp.h>

namespace volt::benchmark {

// This program's own path (for running itself or a binary beside it).
std::string self_path();
// Runs a command and returns its standard output ("" if it failed).
std::string run_capture(const std::string& cmd, int* status = nullptr);
// The number after "key": in a one-line JSON object (NaN when absent), and the string.
double json_number(const std::string& line, const std::string& key);
std::string json_string(const std::string& line, const std::string& key);

// The child process of measure_first_call (--first-call BATCH): prints one JSON line.
int first_call_child(const Options& o);
std::vector<Metric> measure_first_call(const Options& o);
Metric measure_call_overhead(const Options& o);
Metric measure_bandwidth(const Options& o);
double peak_rss_mb();
// The least memory traffic of one training step of `net` (bytes), whatever the batch.
double step_min_bytes(const std::shared_ptr<nn::MLP>& net);

#ifdef VOLT_WITH_CUDA
Metric measure_cublas_floor(int64_t batch, int reps);
Metric measure_cuda_memory();
#endif

}  // namespace volt::benchmark
