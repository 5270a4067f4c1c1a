#include <volt/tensor/cuda/allocator.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <volt/tensor/cuda/runtime.h>

namespace volt::cuda {

namespace {

struct DevicePool {
  std::multimap<size_t, void*> free_blocks;    // size class -> cached blocks
  std::unordered_map<void*, size_t> live;      // block -> its size class
  MemoryStats stats;
  // Private pools (begin_private_pool): the active one, each one's free
  // blocks, and which pool every private block belongs to.
  int64_t active = 0, next_pool = 1;
  std::unordered_map<int64_t, std::multimap<size_t, void*>> private_free;
  std::unordered_map<void*, int64_t> owner;
};

std::mutex g_mutex;
std::vector<DevicePool>& pools() {
  static std::vector<DevicePool> p(static_cast<size_t>(std::max(device_count(), 1)));
  return p;
}

DevicePool& pool(int device) {
  VOLT_CHECK(device >= 0 && device < static_cast<int>(pools().size()), "cuda allocator",
             "no device cuda:" << device);
  return pools()[static_cast<size_t>(device)];
}

// Gives every cached block of `p` back; the caller holds the lock and the device.
void release_cached(DevicePool& p) {
  for (auto& [size, ptr] : p.free_blocks) {
    cudaFree(ptr);
    p.stats.reserved -= size;
    ++p.stats.free_calls;
  }
  p.free_blocks.clear();
}

std::string human(size_t b) {
  std::ostringstream os;
  if (b >= (1u << 20)) os << static_cast<double>(b) / (1 << 20) << " MiB";
  else os << b << " bytes";
  return os.str();
}

}  // namespace

std::string MemoryStats::str() const {
  std::ostringstream os;
  os << "allocated " << human(allocated) << ", reserved " << human(reserved) << ", peak " << human(peak)
     << ", " << malloc_calls << " cudaMalloc / " << free_calls << " cudaFree calls";
  return os.str();
}

size_t size_class(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  constexpr size_t kSmall = 1 << 20;
  if (nbytes <= kSmall) return (nbytes + 511) / 512 * 512;
  // Between 2^k and 2^(k+1): four equal steps, so waste stays under 25 %.
  size_t pow2 = kSmall;
  while (pow2 * 2 < nbytes) pow2 *= 2;
  size_t step = pow2 / 4;
  return (nbytes + step - 1) / step * step;
}

void* device_allocate(size_t nbytes, int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DevicePool& p = pool(device);
  const size_t size = size_class(nbytes);
  void* ptr = nullptr;
  std::multimap<size_t, void*>* mine = p.active ? &p.private_free[p.active] : nullptr;
  // Reuse a cached block of exactly this class (classes are coarse enough
  // that the training loop's shapes map onto a handful of them): the active
  // private pool's first, then the shared cache's.
  auto own = mine ? mine->find(size) : std::multimap<size_t, void*>::iterator{};
  if (mine && own != mine->end()) {
    ptr = own->second;
    mine->erase(own);
  } else if (auto it = p.free_blocks.find(size); it != p.free_blocks.end()) {
    ptr = it->second;
    p.free_blocks.erase(it);
  } else {
    DeviceGuard g(device);
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e == cudaErrorMemoryAllocation && !p.free_blocks.empty()) {
      // Out of memory with blocks cached: give them back and try once more.
      cudaGetLastError();
      VOLT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
      release_cached(p);
      e = cudaMalloc(&ptr, size);
    }
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation) {
      cudaGetLastError();
      VOLT_FAIL("cuda allocator", "cudaMalloc of " << nbytes << " bytes on cuda:" << device << " failed with "
                                                   << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")"
                                                   << sticky_note(e));
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      VOLT_FAIL("cuda allocator", "out of memory on cuda:" << device << " allocating " << nbytes << " bytes ("
                                                           << human(size) << " class; " << p.stats.str()
                                                           << "): " << cudaGetErrorString(e));
    }
    ++p.stats.malloc_calls;
    p.stats.reserved += size;
  }
  p.live[ptr] = size;
  if (p.active) p.owner[ptr] = p.active;
  p.stats.allocated += size;
  p.stats.peak = std::max(p.stats.peak, p.stats.allocated);
  return ptr;
}

void device_free(void* ptr, int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DevicePool& p = pool(device);
  auto it = p.live.find(ptr);
  if (it == p.live.end()) return;  // not ours: nothing to do (never double-free)
  p.stats.allocated -= it->second;
  // Work already queued on the device's one stream that reads this block runs
  // before anything queued later by its next owner, so it can be reused now.
  if (auto o = p.owner.find(ptr); o != p.owner.end()) p.private_free[o->second].emplace(it->second, ptr);
  else p.free_blocks.emplace(it->second, ptr);
  p.live.erase(it);
}

int64_t begin_private_pool(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DevicePool& p = pool(device);
  VOLT_CHECK(p.active == 0, "cuda allocator", "a private pool is already active on cuda:" << device);
  p.active = p.next_pool++;
  p.private_free[p.active];
  return p.active;
}

void end_private_pool(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  pool(device).active = 0;
}

void release_private_pool(int device, int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DevicePool& p = pool(device);
  if (p.active == id) p.active = 0;
  auto f = p.private_free.find(id);
  if (f == p.private_free.end()) return;
  for (auto& [size, ptr] : f->second) p.free_blocks.emplace(size, ptr);
  p.private_free.erase(f);
  for (auto it = p.owner.begin(); it != p.owner.end();)
    it = it->second == id ? p.owner.erase(it) : std::next(it);
}

MemoryStats memory_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return pool(device).stats;
}

void reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DevicePool& p = pool(device);
  p.stats.peak = p.stats.allocated;
}

void empty_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int d = 0; d < device_count(); ++d) {
    DevicePool& p = pool(d);
    if (p.free_blocks.empty()) continue;
    DeviceGuard g(d);
    // Queued work may still read the cached blocks.
    VOLT_CUDA_CHECK(cudaStreamSynchronize(stream(d)));
    release_cached(p);
  }
}

}  // namespace volt::cuda
