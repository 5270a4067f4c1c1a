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
// that built volt).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <nvrtc.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

// ------------------------------------------------------------- kernel globals
// What the kernels' shim reads as threadIdx, blockIdx, blockDim, gridDim.
struct volt_sim_dim3 {
  unsigned x, y, z;
};
extern "C" {
__attribute__((visibility("default"))) volt_sim_dim3 volt_sim_threadIdx{0, 0, 0}, volt_sim_blockIdx{0, 0, 0},
    volt_sim_blockDim{1, 1, 1}, volt_sim_gridDim{1, 1, 1};
}
SIM_EXPORT void volt_sim_syncthreads();

namespace {

std::recursive_mutex g_mutex;  // one lock around the whole simulated device
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

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

// ------------------------------------------------------------- device memory
// One address range for all devices.  Allocations are page-aligned, each with
// an inaccessible guard page after it.
constexpr size_t kPage = 4096;
// Address space reserved for device memory (not memory itself): 64 GiB, or
// less where the process may not map that much.
constexpr size_t kArenaMaxBytes = size_t(64) << 30;
constexpr size_t kArenaMinBytes = size_t(1) << 30;

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

Arena& arena() {
  static Arena* a = [] {
    auto* r = new Arena;
    void* p = MAP_FAILED;
    size_t bytes = kArenaMaxBytes;
    for (; bytes >= kArenaMinBytes; bytes /= 2) {
      p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) break;
    }
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cudasim: cannot reserve an address range for device memory (1 GiB or more)\n");
      std::abort();
    }
    r->base = static_cast<char*>(p);
    r->bytes = bytes;
    // Half the range at most: every allocation also takes a guard page and
    // freed ranges are reused only by requests that fit them.
    r->capacity = std::min(static_cast<size_t>(env_int("VOLT_CUDASIM_MEMORY_MB", 4096)) << 20, bytes / 2);
    r->used_per_device.assign(static_cast<size_t>(sim_device_count()), 0);
    return r;
  }();
  return *a;
}

size_t round_pages(size_t n) { return (n + kPage - 1) / kPage * kPage; }

bool in_arena(const void* p) {
  const Arena& a = arena();
  const char* c = static_cast<const char*>(p);
  return c >= a.base && c < a.base + a.bytes;
}

// The live allocation holding [p, p + n), or none.
bool within_allocation(const void* p, size_t n) {
  Arena& a = arena();
  if (!in_arena(p)) return false;
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - a.base);
  auto it = a.live.upper_bound(off);
  if (it == a.live.begin()) return false;
  --it;
  return off + n <= it->first + it->second;
}

void set_live_access(int prot) {
  Arena& a = arena();
  for (const auto& [off, bytes] : a.live) ::mprotect(a.base + off, bytes, prot);
}

// Makes device memory readable for the scope (device work, or the simulator's own copies).
struct DeviceAccess {
  bool was_open;
  DeviceAccess() : was_open(arena().open) {
    if (!was_open) set_live_access(PROT_READ | PROT_WRITE);
    arena().open = true;
  }
  ~DeviceAccess() {
    if (!was_open) {
      set_live_access(PROT_NONE);
      arena().open = false;
    }
  }
};

const char* g_running_kernel = nullptr;  // for the fault message

void on_fault(int sig, siginfo_t* info, void*) {
  const void* addr = info->si_addr;
  char msg[512];
  if (in_arena(addr)) {
    if (arena().open)
      std::snprintf(msg, sizeof msg,
                    "cudasim: %s touched device address %p, outside every live allocation "
                    "(out of bounds, or freed)\n",
                    g_running_kernel ? g_running_kernel : "device work", addr);
    else
      std::snprintf(msg, sizeof msg,
                    "cudasim: host code dereferenced device address %p; device memory is only reachable "
                    "through kernels and cudaMemcpy\n",
                    addr);
  } else {
    std::snprintf(msg, sizeof msg, "cudasim: signal %d at address %p%s%s\n", sig, addr,
                  g_running_kernel ? " in kernel " : "", g_running_kernel ? g_running_kernel : "");
  }
  ssize_t w = ::write(2, msg, std::strlen(msg));
  (void)w;
  void* frames[48];
  int n = ::backtrace(frames, 48);
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, nullptr);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

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
} g_counters;

}  // namespace

struct CUgraphNode_st {
  Work work;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<Work>> nodes;
};

struct CUstream_st {
  int device = 0;
  std::vector<Work> queue;
  CUgraph_st* capture = nullptr;  // recording into this graph
  bool capture_invalid = false;   // a refused call happened while recording
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
};

namespace {

std::vector<std::unique_ptr<CUstream_st>>& streams() {
  static auto* s = new std::vector<std::unique_ptr<CUstream_st>>;
  return *s;
}

CUstream_st* default_stream(int device) {
  static std::vector<CUstream_st*> d;
  if (d.empty())
    for (int i = 0; i < sim_device_count(); ++i) {
      streams().push_back(std::make_unique<CUstream_st>());
      streams().back()->device = i;
      d.push_back(streams().back().get());
    }
  return d[static_cast<size_t>(device)];
}

CUstream_st* resolve(cudaStream_t s) { return s ? s : default_stream(t_device); }

void run_queue(CUstream_st* s) {
  if (s->queue.empty()) return;
  DeviceAccess access;
  std::vector<Work> q;
  q.swap(s->queue);
  for (Work& w : q) {
    g_running_kernel = w.what.c_str();
    w.run();
    g_running_kernel = nullptr;
  }
}

void run_all() {
  for (auto& s : streams()) run_queue(s.get());
}

// VOLT_CUDASIM_TRACE=1 prints every piece of work as it is queued: what a
// program asks of the GPU, launch by launch.
void enqueue(cudaStream_t s, std::string what, std::function<void()> run,
             cudaGraphNodeType type = cudaGraphNodeTypeKernel) {
  static const bool trace = env_int("VOLT_CUDASIM_TRACE", 0) != 0;
  CUstream_st* st = resolve(s);
  if (trace) std::fprintf(stderr, "cudasim: %s%s\n", st->capture ? "(captured) " : "", what.c_str());
  if (st->capture) {
    st->capture->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{{std::move(what), std::move(run), type}}));
    return;
  }
  if (type == cudaGraphNodeTypeKernel) ++g_counters.kernel_launches;
  if (type == cudaGraphNodeTypeMemcpy) ++g_counters.copies;
  st->queue.push_back({std::move(what), std::move(run), type});
}

// The stream that records now, if any (one at a time).
CUstream_st* capturing_stream() {
  for (auto& s : streams())
    if (s->capture) return s.get();
  return nullptr;
}

// A call the GPU refuses while `s` (or, for a null s, any stream) records:
// the capture is invalidated, as CUDA does.
bool refused_in_capture(CUstream_st* s) {
  CUstream_st* c = capturing_stream();
  if (!c || (s && s != c)) return false;
  c->capture_invalid = true;
  t_last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

// ------------------------------------------------------------- fibers
// A block's threads when the kernel has barriers: each runs on its own stack
// until it reaches __syncthreads or ends; the scheduler then resumes the next.
#if defined(__x86_64__)
// volt_sim_switch(save, next): saves the callee-saved registers and the stack
// pointer into *save, then continues where `next` was saved.
extern "C" void volt_sim_switch(void** save, void* next);
asm(R"(
  .text
  .globl volt_sim_switch
  .type volt_sim_switch, @function
volt_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size volt_sim_switch, .-volt_sim_switch
)");
#endif

enum class FiberState { Ready, AtBarrier, Done };

struct Fiber {
  std::vector<char> stack;
  FiberState state = FiberState::Ready;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

struct Block {
  std::vector<Fiber> fibers;
  size_t current = 0;
  void (*run)(void*) = nullptr;
  void* bound = nullptr;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
};

Block* g_block = nullptr;  // the block whose fibers run now
constexpr size_t kFiberStack = 64 * 1024;

void to_scheduler() {
  Fiber& f = g_block->fibers[g_block->current];
#if defined(__x86_64__)
  volt_sim_switch(&f.sp, g_block->scheduler_sp);
#else
  swapcontext(&f.ctx, &g_block->scheduler);
#endif
}

void fiber_main() {
  g_block->run(g_block->bound);
  g_block->fibers[g_block->current].state = FiberState::Done;
  to_scheduler();
  std::abort();  // a finished fiber is never resumed
}

void start_fiber(Fiber& f) {
  f.state = FiberState::Ready;
  if (f.stack.empty()) f.stack.resize(kFiberStack);
#if defined(__x86_64__)
  // The stack as volt_sim_switch leaves it: six saved registers, then the
  // address `ret` jumps to, laid out so fiber_main starts with an ABI-aligned stack.
  auto top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) & ~uintptr_t(15);
  auto* sp = reinterpret_cast<void**>(top - 64);
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  sp[6] = reinterpret_cast<void*>(&fiber_main);
  sp[7] = nullptr;
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
}

void resume(Block& b, size_t i) {
  b.current = i;
  Fiber& f = b.fibers[i];
#if defined(__x86_64__)
  volt_sim_switch(&b.scheduler_sp, f.sp);
#else
  swapcontext(&b.scheduler, &f.ctx);
#endif
}

// ------------------------------------------------------------- kernels
// A kernel's entry in its library: copies the launch parameters p into
// *bound and says how to run one GPU thread on them and how to free them.
using KernelEntry = void (*)(void** p, void** bound, void (**run)(void*), void (**release)(void*));

}  // namespace

struct CUlib_st {
  void* handle = nullptr;
  bool barriers = false;
};

struct CUkern_st {
  uint64_t magic = 0x766f6c746b65726eull;
  std::string name;
  KernelEntry entry = nullptr;
  bool barriers = false;
};

namespace {

// Runs one launch: every block, every thread.
void run_grid(const CUkern_st& k, dim3 grid, dim3 block, void (*run)(void*), void* bound) {
  volt_sim_gridDim = {grid.x, grid.y, grid.z};
  volt_sim_blockDim = {block.x, block.y, block.z};
  const size_t threads = size_t(block.x) * block.y * block.z;
  static Block fib;  // fibers and their stacks are reused launch to launch
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        volt_sim_blockIdx = {bx, by, bz};
        auto thread_index = [&](size_t t) {
          volt_sim_threadIdx = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                                static_cast<unsigned>(t / (size_t(block.x) * block.y))};
        };
        if (!k.barriers) {
          for (size_t t = 0; t < threads; ++t) {
            thread_index(t);
            run(bound);
          }
          continue;
        }
        fib.fibers.resize(threads);
        fib.run = run;
        fib.bound = bound;
        for (Fiber& f : fib.fibers) start_fiber(f);
        g_block = &fib;
        for (;;) {
          for (size_t t = 0; t < threads; ++t)
            if (fib.fibers[t].state == FiberState::Ready) {
              thread_index(t);
              resume(fib, t);
            }
          size_t done = 0, waiting = 0;
          for (Fiber& f : fib.fibers) (f.state == FiberState::Done ? done : waiting) += 1;
          if (waiting == 0) break;
          if (done > 0) {
            std::fprintf(stderr,
                         "cudasim: in kernel %s, block (%u, %u, %u), %zu threads wait at __syncthreads that "
                         "%zu finished threads never reached (undefined behaviour on a GPU)\n",
                         k.name.c_str(), bx, by, bz, waiting, done);
            std::abort();
          }
          for (Fiber& f : fib.fibers) f.state = FiberState::Ready;
        }
        g_block = nullptr;
      }
}

// The shim in front of every kernel source: CUDA's built-ins for one host
// thread, and per kernel an entry that copies the launch parameters (bind),
// runs one GPU thread (run) and frees the copy (release).
const char* kKernelShim = R"sim(// cudasim kernel shim
#include <cmath>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
using std::exp; using std::log; using std::sqrt; using std::tanh; using std::pow; using std::fabs;
using std::floor; using std::ceil;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
struct volt_sim_dim3 { unsigned x, y, z; };
extern "C" volt_sim_dim3 volt_sim_threadIdx, volt_sim_blockIdx, volt_sim_blockDim, volt_sim_gridDim;
extern "C" void volt_sim_syncthreads();
#define threadIdx volt_sim_threadIdx
#define blockIdx volt_sim_blockIdx
#define blockDim volt_sim_blockDim
#define gridDim volt_sim_gridDim
#define __syncthreads volt_sim_syncthreads
// The launch's parameter values, copied, and the kernel they are for.  The
// kernel is found by deduction, so a device function that shares its name
// (an overload with another signature) does not get in the way.
template <class... A> struct volt_sim_call {
  void (*f)(A...);
  std::tuple<std::decay_t<A>...> values;
  static void run(void* c) {
    auto* x = static_cast<volt_sim_call*>(c);
    std::apply(x->f, x->values);
  }
  static void release(void* c) { delete static_cast<volt_sim_call*>(c); }
};
template <class... A, std::size_t... I>
void* volt_sim_bind(void (*f)(A...), void** p, std::index_sequence<I...>) {
  return new volt_sim_call<A...>{f, {*static_cast<std::decay_t<A>*>(p[I])...}};
}
template <class... A>
void volt_sim_launch(void (*f)(A...), void** p, void** bound, void (**run)(void*), void (**release)(void*)) {
  *bound = volt_sim_bind(f, p, std::index_sequence_for<A...>{});
  *run = volt_sim_call<A...>::run;
  *release = volt_sim_call<A...>::release;
}
#define VOLT_SIM_EXPORT(name) extern "C" void volt_sim_entry_##name(void** p, void** bound, \
    void (**run)(void*), void (**release)(void*)) { volt_sim_launch(name, p, bound, run, release); }
#line 1 "volt_kernel.cu"
)sim";

}  // namespace

SIM_EXPORT void volt_sim_syncthreads() {
  if (!g_block) return;  // a block run without fibers never reaches here
  g_block->fibers[g_block->current].state = FiberState::AtBarrier;
  to_scheduler();
}

// ============================================================= cudart
// Libraries and kernels live as long as the process, as with the driver (the
// API has no call that frees a kernel); kept here, they are not leaks.
static void* owned(std::shared_ptr<void> p) {
  static std::vector<std::shared_ptr<void>> all;
  all.push_back(p);
  return p.get();
}

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

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  default_stream(0);
  streams().push_back(std::make_unique<CUstream_st>());
  streams().back()->device = t_device;
  *s = streams().back().get();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (refused_in_capture(resolve(s))) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  run_queue(resolve(s));
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  install_fault_handler();
  if (CUstream_st* c = capturing_stream(); c && c->mode == cudaStreamCaptureModeGlobal && refused_in_capture(c))
    return cudaErrorStreamCaptureUnsupported;
  ++g_counters.mallocs;
  Arena& a = arena();
  const size_t bytes = round_pages(size == 0 ? 1 : size);
  size_t& used = a.used_per_device[static_cast<size_t>(t_device)];
  if (used + bytes > a.capacity) return fail(cudaErrorMemoryAllocation);
  size_t off = SIZE_MAX;
  for (auto it = a.holes.begin(); it != a.holes.end(); ++it)
    if (it->second >= bytes + kPage) {
      off = it->first;
      const size_t rest = it->second - bytes - kPage;
      a.holes.erase(it);
      if (rest) a.holes[off + bytes + kPage] = rest;
      break;
    }
  if (off == SIZE_MAX) {
    if (a.top + bytes + kPage > a.bytes) return fail(cudaErrorMemoryAllocation);
    off = a.top;
    a.top += bytes + kPage;
  }
  a.live[off] = bytes;
  used += bytes;
  // Fresh device memory holds garbage: 0xff bytes, NaN as floats.
  ::mprotect(a.base + off, bytes, PROT_READ | PROT_WRITE);
  std::memset(a.base + off, 0xff, bytes);
  if (!a.open) ::mprotect(a.base + off, bytes, PROT_NONE);
  *ptr = a.base + off;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!ptr) return cudaSuccess;
  if (refused_in_capture(nullptr)) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  run_all();  // cudaFree waits for the device
  Arena& a = arena();
  if (!in_arena(ptr)) return fail(cudaErrorInvalidValue);
  const size_t off = static_cast<size_t>(static_cast<char*>(ptr) - a.base);
  auto it = a.live.find(off);
  if (it == a.live.end()) return fail(cudaErrorInvalidValue);
  const size_t bytes = it->second;
  a.live.erase(it);
  a.used_per_device[static_cast<size_t>(t_device)] -= bytes;
  ::mprotect(a.base + off, bytes, PROT_NONE);
  ::madvise(a.base + off, bytes, MADV_DONTNEED);
  a.holes[off] = bytes + kPage;
  return cudaSuccess;
}

// Pinned host memory is host memory here; a mapped allocation's device address
// is its host address, as with unified addressing on a GPU.
std::map<void*, unsigned>& host_allocations() {
  static auto* m = new std::map<void*, unsigned>;
  return *m;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!ptr) return fail(cudaErrorInvalidValue);
  void* p = std::aligned_alloc(kPage, round_pages(std::max<size_t>(size, 1)));
  if (!p) return fail(cudaErrorMemoryAllocation);
  host_allocations()[p] = flags;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned int flags) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = host_allocations().find(host);
  if (!dev || flags != 0 || it == host_allocations().end() || !(it->second & cudaHostAllocMapped))
    return fail(cudaErrorInvalidValue);
  *dev = host;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!ptr) return cudaSuccess;
  if (refused_in_capture(nullptr)) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  run_all();
  if (host_allocations().erase(ptr) == 0) return fail(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (count == 0) return cudaSuccess;
  const bool dst_dev = within_allocation(dst, count), src_dev = within_allocation(src, count);
  switch (kind) {
    case cudaMemcpyHostToDevice: {
      if (!dst_dev || in_arena(src)) return fail(cudaErrorInvalidValue);
      // A graph would read pageable memory at each replay, not now: refused.
      if (refused_in_capture(resolve(s))) return cudaErrorStreamCaptureUnsupported;
      // From pageable memory: the data is staged before the call returns.
      auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                        static_cast<const char*>(src) + count);
      enqueue(s, "cudaMemcpyAsync (host to device)", [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); },
              cudaGraphNodeTypeMemcpy);
      return cudaSuccess;
    }
    case cudaMemcpyDeviceToHost: {
      if (!src_dev || in_arena(dst)) return fail(cudaErrorInvalidValue);
      if (refused_in_capture(resolve(s))) return cudaErrorStreamCaptureUnsupported;
      // Into pageable memory the copy is complete when the call returns.
      ++g_counters.host_syncs;
      run_queue(resolve(s));
      DeviceAccess access;
      std::memcpy(dst, src, count);
      return cudaSuccess;
    }
    case cudaMemcpyDeviceToDevice:
      if (!src_dev || !dst_dev) return fail(cudaErrorInvalidValue);
      enqueue(s, "cudaMemcpyAsync (device to device)", [=] { std::memmove(dst, src, count); },
              cudaGraphNodeTypeMemcpy);
      return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (count == 0) return cudaSuccess;
  if (!within_allocation(ptr, count)) return fail(cudaErrorInvalidValue);
  if (refused_in_capture(nullptr)) return cudaErrorStreamCaptureUnsupported;
  // On the default stream, which waits for the device's other streams' work.
  ++g_counters.host_syncs;
  run_all();
  DeviceAccess access;
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t s) {
  if (dst_device < 0 || dst_device >= sim_device_count() || src_device < 0 || src_device >= sim_device_count())
    return fail(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, s);
}

// Events stamp the host's clock when the queue reaches them.
struct CUevent_st {
  CUstream_st* stream = nullptr;
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (event->stream) run_queue(event->stream);  // a queued record must not outlive it
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  event->stream = resolve(s);
  event->recorded = false;
  enqueue(s, "cudaEventRecord", [event] {
    event->at = std::chrono::steady_clock::now();
    event->recorded = true;
  }, cudaGraphNodeTypeEventRecord);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (refused_in_capture(event->stream)) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  if (event->stream) run_queue(event->stream);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

// ------------------------------------------------------------- graphs
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // The legacy default stream cannot record; nor can two streams at once here.
  if (!s || capturing_stream()) return fail(cudaErrorStreamCaptureUnsupported);
  s->capture = new CUgraph_st;
  s->capture_invalid = false;
  s->mode = mode;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!status) return fail(cudaErrorInvalidValue);
  CUstream_st* st = resolve(s);
  *status = !st->capture ? cudaStreamCaptureStatusNone
            : st->capture_invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!s || !graph) return fail(cudaErrorInvalidValue);
  if (!s->capture) return fail(cudaErrorIllegalState);
  std::unique_ptr<CUgraph_st> g(s->capture);
  s->capture = nullptr;
  *graph = nullptr;
  if (s->capture_invalid) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = g.release();
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!graph || !count) return fail(cudaErrorInvalidValue);
  if (nodes)
    for (size_t i = 0; i < *count && i < graph->nodes.size(); ++i) nodes[i] = graph->nodes[i].get();
  *count = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* type) {
  if (!node || !type) return fail(cudaErrorInvalidValue);
  *type = node->work.type;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  auto nodes = std::make_shared<std::vector<Work>>();
  for (const auto& n : graph->nodes) nodes->push_back(n->work);
  *exec = new CUgraphExec_st{std::move(nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!exec) return fail(cudaErrorInvalidResourceHandle);
  if (resolve(s)->capture) return fail(cudaErrorStreamCaptureUnsupported);  // no child graphs here
  ++g_counters.graph_launches;
  std::shared_ptr<const std::vector<Work>> nodes = exec->nodes;
  for (const Work& w : *nodes) g_counters.graph_kernels += w.type == cudaGraphNodeTypeKernel;
  resolve(s)->queue.push_back({"graph of " + std::to_string(nodes->size()) + " nodes", [nodes] {
                                 for (const Work& w : *nodes) {
                                   g_running_kernel = w.what.c_str();
                                   w.run();
                                 }
                                 g_running_kernel = nullptr;
                               }, cudaGraphNodeTypeGraph});
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete exec;  // queued launches hold the nodes themselves
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete graph;
  return cudaSuccess;
}

// The counters, in the order of `Counters`: how many of `n` were written.
SIM_EXPORT int volt_cudasim_counters(long long* out, int n) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const long long all[] = {g_counters.host_syncs,     g_counters.mallocs,       g_counters.kernel_launches,
                           g_counters.graph_launches, g_counters.graph_kernels, g_counters.copies};
  int k = 0;
  for (; k < n && k < static_cast<int>(sizeof all / sizeof all[0]); ++k) out[k] = all[k];
  return k;
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, enum cudaJitOption*, void**, unsigned int,
                                enum cudaLibraryOption*, void**, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // The "CUBIN": a line "cudasim <bytes> <barriers>", then the shared library's
  // bytes in hex.  The API passes no length, and the image may be a damaged
  // cache file: hex text ends at the NUL the caller's string ends with, so its
  // real length is known without reading past it, and must match the header.
  const char* c = static_cast<const char*>(code);
  if (!c) return fail(cudaErrorInvalidKernelImage);
  unsigned long long bytes = 0;
  int barriers = 0, header = 0;
  if (std::sscanf(c, "cudasim %llu %d\n%n", &bytes, &barriers, &header) != 2 || header == 0)
    return fail(cudaErrorInvalidKernelImage);
  const char* hex = c + header;
  const size_t digits = std::strlen(hex);
  if (bytes < 4 || bytes > (1ull << 32) || digits != 2 * bytes) return fail(cudaErrorInvalidKernelImage);
  std::string image(bytes, '\0');
  auto nibble = [](char h) { return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1; };
  for (size_t i = 0; i < bytes; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return fail(cudaErrorInvalidKernelImage);
    image[i] = static_cast<char>(hi << 4 | lo);
  }
  if (std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) return fail(cudaErrorInvalidKernelImage);
  char path[] = "/tmp/volt_cudasim_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return fail(cudaErrorInvalidKernelImage);
  bool ok = ::write(fd, image.data(), image.size()) == static_cast<ssize_t>(image.size());
  ::close(fd);
  void* h = ok ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  ::unlink(path);
  if (!h) return fail(cudaErrorInvalidKernelImage);
  auto* lib = static_cast<CUlib_st*>(owned(std::make_shared<CUlib_st>()));
  lib->handle = h;
  lib->barriers = barriers != 0;
  *library = lib;
  return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library, const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!library || !library->handle) return fail(cudaErrorInvalidResourceHandle);
  auto entry = reinterpret_cast<KernelEntry>(::dlsym(library->handle, (std::string("volt_sim_entry_") + name).c_str()));
  if (!entry) return fail(cudaErrorSymbolNotFound);
  auto* k = static_cast<CUkern_st*>(owned(std::make_shared<CUkern_st>()));
  k->name = name;
  k->barriers = library->barriers;
  k->entry = entry;
  *kernel = k;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto* k = static_cast<const CUkern_st*>(func);
  if (!k || k->magic != 0x766f6c746b65726eull) return fail(cudaErrorInvalidDeviceFunction);
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || shared != 0)
    return fail(cudaErrorInvalidConfiguration);
  void* bound = nullptr;  // the parameters' values, copied now
  void (*run)(void*) = nullptr;
  void (*release)(void*) = nullptr;
  k->entry(args, &bound, &run, &release);
  const std::string what = "kernel " + k->name + " <<<(" + std::to_string(grid.x) + "," + std::to_string(grid.y) +
                           "," + std::to_string(grid.z) + "), " + std::to_string(threads) + ">>>";
  // The bound values live as long as the work (a graph node runs them again).
  std::shared_ptr<void> values(bound, release);
  enqueue(s, what, [k, grid, block, run, values] { run_grid(*k, grid, block, run, values.get()); });
  return cudaSuccess;
}

}  // extern "C"

// ============================================================= cuBLAS
struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

// C = alpha op(A) op(B) + beta C, column-major, accumulated in double.
template <class T>
void gemm_cm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A, int lda,
             const T* B, int ldb, T beta, T* C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const T a = ta == CUBLAS_OP_N ? A[i + size_t(p) * lda] : A[p + size_t(i) * lda];
        const T b = tb == CUBLAS_OP_N ? B[p + size_t(j) * ldb] : B[j + size_t(p) * ldb];
        acc += double(a) * double(b);
      }
      T& c = C[i + size_t(j) * ldc];
      // beta == 0 ignores C (it may hold NaN), as BLAS specifies.
      c = static_cast<T>(double(alpha) * acc + (beta == T(0) ? 0.0 : double(beta) * double(c)));
    }
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

template <class T>
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,
                            const T* beta, T* C, int ldc, long long sc, int batches) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batches < 0 ||
      lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batches == 0) return CUBLAS_STATUS_SUCCESS;
  // Every operand must lie in device memory: the extents cuBLAS will touch.
  auto extent = [](int rows, int cols, int ld) { return (size_t(cols) - 1) * ld + rows; };
  const size_t ea = ta == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda);
  const size_t eb = tb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb);
  for (int b = 0; b < batches; ++b)
    if ((k > 0 && (!within_allocation(A + b * sa, ea * sizeof(T)) || !within_allocation(B + b * sb, eb * sizeof(T)))) ||
        !within_allocation(C + b * sc, extent(m, n, ldc) * sizeof(T)))
      return CUBLAS_STATUS_INVALID_VALUE;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  std::string what = "cuBLAS gemm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  if (batches > 1) what += " batches=" + std::to_string(batches);
  enqueue(h->stream, what, [=] {
    for (int b = 0; b < batches; ++b) gemm_cm<T>(ta, tb, m, n, k, al, A + b * sa, lda, B + b * sb, ldb, be, C + b * sc, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    default: return "unknown error";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return gemm_batched<float>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const double* alpha, const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return gemm_batched<double>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batches) {
  return gemm_batched<float>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batches);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sa,
                                         const double* B, int ldb, long long sb, const double* beta, double* C,
                                         int ldc, long long sc, int batches) {
  return gemm_batched<double>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batches);
}

}  // extern "C"

// ============================================================= NVRTC
struct _nvrtcProgram {
  std::string source, name, log, image;
};

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
  }
}

// Version 0.h, h a hash of the kernel shim: volt's kernel cache keys on this,
// so a real NVRTC's entries and those of an older shim are never loaded.
nvrtcResult nvrtcVersion(int* major, int* minor) {
  unsigned h = 2166136261u;
  for (const char* c = kKernelShim; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
  *major = 0;
  *minor = static_cast<int>(h % 1000000);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetNumSupportedArchs(int* n) {
  *n = 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 90;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers, const char* const*,
                               const char* const*) {
  if (!prog || !src || num_headers != 0) return NVRTC_ERROR_INVALID_INPUT;
  *prog = new _nvrtcProgram{src, name ? name : "default_program", "", ""};
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  delete *prog;
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

// Builds the source with the host compiler into a shared library.
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int, const char* const*) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  // The kernels: extern "C" __global__ functions, also those declared through a
  // macro whose first argument is the name (VOLT_KERNEL(name)).
  std::set<std::string> names;
  std::vector<std::string> order;
  std::istringstream lines(prog->source);
  std::string line;
  static const std::regex direct(R"(__global__\s+void\s+([A-Za-z_]\w*)\s*\()");
  static const std::regex macro(R"(^\s*[A-Z_]+KERNEL\(([A-Za-z_]\w*)\))");
  while (std::getline(lines, line)) {
    if (line.find("#define") != std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, direct) || std::regex_search(line, m, macro))
      if (names.insert(m[1]).second) order.push_back(m[1]);
  }
  std::string src = std::string(kKernelShim) + prog->source + "\n";
  for (const std::string& n : order) src += "VOLT_SIM_EXPORT(" + n + ")\n";

  char dir[] = "/tmp/volt_cudasim_build_XXXXXX";
  if (!::mkdtemp(dir)) return NVRTC_ERROR_INTERNAL_ERROR;
  const std::string d = dir, cpp = d + "/kernel.cpp", so = d + "/kernel.so", log = d + "/log.txt";
  std::ofstream(cpp) << src;
  const char* cxx = std::getenv("VOLT_CXX");
  // Without this library's preload: the compiler is not a CUDA program, and an
  // instrumented (sanitizer) build of it would fail the compiler's run.
  const std::string cmd = "env -u LD_PRELOAD " + std::string(cxx && *cxx ? cxx : VOLT_CUDASIM_CXX) +
                          " -std=c++17 -O1 -ffp-contract=off -fno-math-errno -shared -fPIC -w -o " + so + " " + cpp +
                          " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream lf(log);
  std::stringstream ls;
  ls << lf.rdbuf();
  prog->log = ls.str();
  if (rc == 0) {
    std::ifstream in(so, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string lib = bytes.str();
    const bool barriers = prog->source.find("__syncthreads") != std::string::npos;
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(2 * lib.size());
    for (unsigned char b : lib) {
      hex += kHex[b >> 4];
      hex += kHex[b & 15];
    }
    prog->image = "cudasim " + std::to_string(lib.size()) + " " + (barriers ? "1" : "0") + "\n" + hex;
  }
  std::remove(cpp.c_str());
  std::remove(so.c_str());
  std::remove(log.c_str());
  ::rmdir(dir);
  return rc == 0 ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  std::memcpy(log, prog->log.c_str(), prog->log.size() + 1);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  if (!prog || prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->image.size();
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  if (!prog || prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  std::memcpy(cubin, prog->image.data(), prog->image.size());
  return NVRTC_SUCCESS;
}

// The simulated device runs "CUBIN" only; PTX is the same image.
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) { return nvrtcGetCUBINSize(prog, size); }
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) { return nvrtcGetCUBIN(prog, ptx); }

}  // extern "C"
