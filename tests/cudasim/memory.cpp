// cudasim: device memory.  One reserved address range, readable only while
// queued device work runs; each allocation followed by a guard page; a fault
// names the address and whether host code or a kernel touched it.
#include "sim.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cudasim {

// Address space reserved for device memory (not memory itself): 64 GiB, or
// less where the process may not map that much.
constexpr size_t kArenaMaxBytes = size_t(64) << 30;
constexpr size_t kArenaMinBytes = size_t(1) << 30;

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

DeviceAccess::DeviceAccess() : was_open(arena().open) {
  if (!was_open) set_live_access(PROT_READ | PROT_WRITE);
  arena().open = true;
}

DeviceAccess::~DeviceAccess() {
  if (!was_open) {
    set_live_access(PROT_NONE);
    arena().open = false;
  }
}

const char* g_running_kernel = nullptr;

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

}  // namespace cudasim

using namespace cudasim;

extern "C" {

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

// Queued on the stream like a kernel (a memset node when captured).
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (count == 0) return cudaSuccess;
  if (!within_allocation(ptr, count)) return fail(cudaErrorInvalidValue);
  enqueue(s, "cudaMemsetAsync", [=] { std::memset(ptr, value, count); }, cudaGraphNodeTypeMemset);
  return cudaSuccess;
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

}  // extern "C"
