// cudasim: a simulated CUDA GPU on the host, for testing volt's CUDA backend
// on machines without one.
//
// It defines the few cudart, cuBLAS and NVRTC functions volt calls, with the
// signatures of the toolkit's own headers.  Preloaded into a volt program
// (LD_PRELOAD=libvolt_cudasim.so), its definitions are found before the real
// libraries', so the CUDA backend runs unchanged against one simulated device:
//
//   * NVRTC: a "compile" builds the CUDA C++ source with the host C++ compiler,
//     behind a shim that gives threadIdx, blockIdx, __syncthreads and
//     __shared__ their meaning, into a shared library; that library's bytes are
//     the "CUBIN", so volt's on-disk kernel cache stores and reloads them.
//   * Launches run every thread of every block.  A kernel that calls
//     __syncthreads runs its block's threads as fibers that all stop at each
//     barrier; a barrier that some threads of a block never reach is reported.
//   * Work is asynchronous as on a GPU: launches, GEMMs and copies to the
//     device are queued on their stream and run at a synchronisation (a stream
//     sync, a copy to the host, cudaFree).  Launch parameters, GEMM scalars and
//     host data copied to the device are captured when called, as CUDA does.
//     cudaEventQuery answers "not ready" for an event still queued, and the
//     device then runs the queue, as time would pass on a GPU.
//   * Device memory lives in its own address range, readable only while queued
//     device work runs.  Host code that dereferences a device pointer, or a
//     kernel that strays outside every allocation (each is followed by a guard
//     page), stops the program with a message naming the address.
//   * New allocations are filled with 0xff bytes (NaN for floats), so a kernel
//     that reads memory nobody wrote shows it.
//
//   * Stream capture and CUDA graphs: between cudaStreamBeginCapture and
//     cudaStreamEndCapture a stream's work is recorded, not queued; a graph,
//     instantiated, replays the recorded nodes in order on each cudaGraphLaunch.
//     What a GPU refuses while capturing is refused (host synchronisation,
//     copies from pageable host memory, cudaMalloc in global mode) and ends the
//     capture as invalidated.
//   * Counters (volt_cudasim_counters): host synchronisations, cudaMalloc
//     calls, kernel launches, graph launches and the kernels they ran, copies.
//
// Not simulated: warp-level intrinsics and atomics (volt's kernels use
// neither), dynamic shared memory, several streams per device, graphs with
// branches (nodes run in capture order).
//
// Environment: VOLT_CUDASIM_DEVICES (default 1), VOLT_CUDASIM_MEMORY_MB (the
// device's memory, default 4096), VOLT_CXX (the compiler; default the one
#include "sim.h"

#include <cstdlib>

namespace cudasim {

std::recursive_mutex g_mutex;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;
Counters g_counters;

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int sim_device_count() {
  static const int n = env_int("VOLT_CUDASIM_DEVICES", 1);
  return n;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = sim_device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= sim_device_count()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= sim_device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    // Few multiprocessors: small grids, so the kernels' grid-stride loops go round.
    case cudaDevAttrMultiProcessorCount: *value = 2; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidKernelImage: return "cudaErrorInvalidKernelImage";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalState: return "the resource is not in a valid state to perform the requested operation";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return "unknown error";
  }
}

}  // extern "C"

// The counters, in the order of `Counters`: how many of `n` were written.
SIM_EXPORT int volt_cudasim_counters(long long* out, int n) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const long long all[] = {g_counters.host_syncs,     g_counters.mallocs,       g_counters.kernel_launches,
                           g_counters.graph_launches, g_counters.graph_kernels, g_counters.copies};
  int k = 0;
  for (; k < n && k < static_cast<int>(sizeof all / sizeof all[0]); ++k) out[k] = all[k];
  return k;
}
