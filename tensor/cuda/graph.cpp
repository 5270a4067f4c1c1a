#include <volt/tensor/cuda/graph.h>

#include <dlfcn.h>

#include <atomic>
#include <string>
#include <vector>

#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>

namespace volt::cuda {

namespace {
std::atomic<int64_t> g_graph_launches{0};
thread_local void* t_rng_word = nullptr;

cudaKernel_t rng_advance_kernel(int device) {
  static const std::string src =
      "extern \"C\" __global__ void volt_rng_advance(unsigned long long* word, unsigned long long n) {\n"
      "  if (blockIdx.x == 0 && threadIdx.x == 0) word[1] += n;\n"
      "}\n";
  return get_kernel(src, "volt_rng_advance", device);
}
}  // namespace

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  // Queued launches may still read the pool's blocks: they run before
  // anything queued by the blocks' next owners (one stream per device).
  if (pool_) release_private_pool(device_, pool_);
}

void Graph::capture(int device, const std::function<void()>& work) {
  VOLT_CHECK(!exec_, "cuda graph", "this graph was captured already");
  device_ = device;
  DeviceGuard guard(device);
  cudaStream_t s = stream(device);
  // First-use work that a capture must not meet: the kernels a graph adds of
  // its own are compiled and loaded, and the error word allocated, now.
  rng_advance_kernel(device);
  error_word(device);
  pool_ = begin_private_pool(device);
  // Relaxed: the allocator may still need a cudaMalloc for a block the
  // recorded work asks for (memory is not a node of the graph).
  VOLT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  std::string failed;
  try {
    work();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  end_private_pool(device);
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  if (failed.empty() && ended != cudaSuccess) failed = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  cudaGetLastError();
  if (!failed.empty()) {
    if (g) cudaGraphDestroy(g);
    VOLT_FAIL("cuda graph", "capturing the work of cuda:" << device << " failed: " << failed);
  }
  graph_ = g;
  VOLT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  size_t n = 0;
  VOLT_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  std::vector<cudaGraphNode_t> all(n);
  if (n) VOLT_CUDA_CHECK(cudaGraphGetNodes(graph_, all.data(), &n));
  nodes_ = n;
  for (cudaGraphNode_t node : all) {
    cudaGraphNodeType t{};
    VOLT_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    kernel_nodes_ += t == cudaGraphNodeTypeKernel;
    memcpy_nodes_ += t == cudaGraphNodeTypeMemcpy;
  }
}

void Graph::launch() {
  VOLT_CHECK(exec_, "cuda graph", "launch() before capture()");
  DeviceGuard guard(device_);
  VOLT_CUDA_CHECK(cudaGraphLaunch(exec_, stream(device_)));
  g_graph_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t graph_launches() { return g_graph_launches.load(); }

void* rng_state_word() { return t_rng_word; }
RngWordScope::RngWordScope(void* word) : prev_(t_rng_word) { t_rng_word = word; }
RngWordScope::~RngWordScope() { t_rng_word = prev_; }

void advance_rng_offset(void* word, uint64_t n, int device) {
  cudaKernel_t k = rng_advance_kernel(device);
  unsigned long long count = n;
  void* params[] = {&word, &count};
  launch(k, device, dim3(1), dim3(1), params);
}

std::optional<SimCounters> simulated_counters() {
  using Fn = int (*)(long long*, int);
  static const Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "volt_cudasim_counters"));
  if (!fn) return std::nullopt;
  long long v[6] = {};
  if (fn(v, 6) != 6) return std::nullopt;
  return SimCounters{v[0], v[1], v[2], v[3], v[4], v[5]};
}

}  // namespace volt::cuda
