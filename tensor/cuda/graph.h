// CUDA graphs as volt uses them: the work a program queues on a device's
// stream, recorded once (stream capture) and replayed by one launch.
//
//   volt::cuda::Graph g;
//   g.capture(0, [&] { run_the_step(); });   // nothing runs: launches are recorded
//   for (;;) g.launch();                     // one cudaGraphLaunch per step
//
// Memory the recorded work allocates comes from a private pool of the caching
// allocator (allocator.h), kept for the graph's lifetime, so the addresses
// baked into its nodes stay the graph's own.  A call that a capture refuses
// (a host synchronisation, a copy from pageable memory) makes capture() throw
// a volt::Error naming it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace volt::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records what `work` queues on `device`'s stream and instantiates it.
  void capture(int device, const std::function<void()>& work);
  // One launch of the whole graph on the device's stream (no host wait).
  void launch();
  bool captured() const { return exec_ != nullptr; }
  size_t nodes() const { return nodes_; }
  size_t kernel_nodes() const { return kernel_nodes_; }
  size_t memcpy_nodes() const { return memcpy_nodes_; }

 private:
  int device_ = -1;
  int64_t pool_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0, kernel_nodes_ = 0, memcpy_nodes_ = 0;
};

// Graph launches volt has made since the process started.
int64_t graph_launches();

// The Philox seed and offset the jit's fused kernels read (two u64 in device
// memory: seed, offset) instead of their launch arguments, while a scope sets
// it: a captured graph's kernels then draw from what the word holds at each
// replay, and the offset, advanced by a node of the graph, moves on.
void* rng_state_word();
class RngWordScope {
 public:
  explicit RngWordScope(void* word);
  ~RngWordScope();
  RngWordScope(const RngWordScope&) = delete;
  RngWordScope& operator=(const RngWordScope&) = delete;

 private:
  void* prev_;
};
// Queues one kernel adding `n` to word[1] (the offset) on the device's stream.
void advance_rng_offset(void* word, uint64_t n, int device);

// What the simulated GPU of tests/cudasim counted, when a program runs on it
// (preloaded); nothing on a real GPU.
struct SimCounters {
  long long host_syncs = 0, mallocs = 0, kernel_launches = 0, graph_launches = 0, graph_kernels = 0, copies = 0;
};
std::optional<SimCounters> simulated_counters();

}  // namespace volt::cuda
