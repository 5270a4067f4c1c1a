// cudasim's insides, shared by its files (the simulator is described in
// cudasim.cpp):
//   cudasim.cpp  the device, its errors and counters
//   memory.cpp   device memory (its own address range, guard pages, faults), copies
//   streams.cpp  streams, events, stream capture and CUDA graphs
//   launch.cpp   kernel libraries, launches, a block's threads as fibers
//   cublas.cpp   the cuBLAS GEMMs, computed on the host in double
//   nvrtc.cpp    "compiling" CUDA C++ with the host compiler behind a shim
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace cudasim {

extern std::recursive_mutex g_mutex;  // one lock around the whole simulated device
extern thread_local cudaError_t t_last_error;
extern thread_local int t_device;

cudaError_t fail(cudaError_t e);  // records e as the last error and returns it
int env_int(const char* name, int fallback);
int sim_device_count();

// ------------------------------------------------------------- device memory
// One address range for all devices.  Allocations are page-aligned, each with
// an inaccessible guard page after it.
constexpr size_t kPage = 4096;

struct Arena {
  char* base = nullptr;
  size_t bytes = 0;                        // size of the reserved range
  size_t top = 0;                          // bytes of the range ever handed out
  std::map<size_t, size_t> live;           // offset -> bytes (page-rounded) of live allocations
  std::map<size_t, size_t> holes;          // offset -> bytes of freed ranges (guard pages included)
  std::vector<size_t> used_per_device;
  size_t capacity = 0;
  bool open = false;                       // device work is running: live ranges readable
};

Arena& arena();
size_t round_pages(size_t n);
bool in_arena(const void* p);
// The live allocation holding [p, p + n), or none.
bool within_allocation(const void* p, size_t n);

// Makes device memory readable for the scope (device work, or the simulator's own copies).
struct DeviceAccess {
  bool was_open;
  DeviceAccess();
  ~DeviceAccess();
};

extern const char* g_running_kernel;  // for the fault message
void install_fault_handler();

// ------------------------------------------------------------- streams
struct Work {
  std::string what;
  std::function<void()> run;  // may run more than once (a graph node)
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
};

// What the simulator has been asked, since the process started.
struct Counters {
  long long host_syncs = 0;        // the host waited for device work
  long long mallocs = 0;           // cudaMalloc calls
  long long kernel_launches = 0;   // cudaLaunchKernel and cuBLAS calls queued directly
  long long graph_launches = 0;    // cudaGraphLaunch calls
  long long graph_kernels = 0;     // kernel nodes those launches ran
  long long copies = 0;            // cudaMemcpy*Async calls queued directly
};
extern Counters g_counters;

// An f32 value with its mantissa rounded to TF32's 10 bits (to nearest even),
// as cuBLAS and cuBLASLt read operands in TF32 mode.
inline double to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0xFFFu + ((bits >> 13) & 1u);
  bits &= ~0x1FFFu;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

}  // namespace cudasim

struct CUgraphNode_st {
  cudasim::Work work;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<cudasim::Work>> nodes;
};

struct CUstream_st {
  int device = 0;
  std::vector<cudasim::Work> queue;
  CUgraph_st* capture = nullptr;  // recording into this graph
  bool capture_invalid = false;   // a refused call happened while recording
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
};

namespace cudasim {

std::vector<std::unique_ptr<CUstream_st>>& streams();
CUstream_st* default_stream(int device);
CUstream_st* resolve(cudaStream_t s);  // a null stream is the device's default one
void run_queue(CUstream_st* s);        // runs the stream's queued work now
void run_all();
// Queues work on s, or records it into the graph s captures.  VOLT_CUDASIM_TRACE=1
// prints every piece of work as it is queued: what a program asks of the GPU.
void enqueue(cudaStream_t s, std::string what, std::function<void()> run,
             cudaGraphNodeType type = cudaGraphNodeTypeKernel);
// The stream that records now, if any (one at a time).
CUstream_st* capturing_stream();
// A call the GPU refuses while `s` (or, for a null s, any stream) records:
// the capture is invalidated, as CUDA does.
bool refused_in_capture(CUstream_st* s);

// ------------------------------------------------------------- kernels
// The shim in front of every kernel source (nvrtc.cpp).
extern const char* const kKernelShim;

}  // namespace cudasim
