#include <volt/tensor/storage.h>

#include <cstdint>
#include <atomic>

#include <volt/tensor/backend.h>
#include <volt/tensor/error.h>
#include <volt/tensor/memory_stats.h>

namespace volt {

namespace {
std::atomic<uint64_t> g_allocations{0};
std::atomic<uint64_t> g_bytes{0}, g_live{0}, g_peak{0};

void note_allocated(uint64_t n) {
  g_bytes.fetch_add(n, std::memory_order_relaxed);
  const uint64_t live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  uint64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}
}  // namespace

StorageBytes storage_bytes() {
  return {g_bytes.load(std::memory_order_relaxed), g_live.load(std::memory_order_relaxed),
          g_peak.load(std::memory_order_relaxed)};
}

void reset_storage_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

uint64_t Storage::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  Backend* be = backend_for(device.type);
  VOLT_CHECK(be != nullptr, "allocate",
             "device " << device.str() << " is not available in this build or on this machine");
  // Backends round sizes up; a request near SIZE_MAX must not wrap to a small block.
  VOLT_CHECK(nbytes <= static_cast<size_t>(PTRDIFF_MAX) / 2, "allocate",
             "cannot allocate " << nbytes << " bytes on " << device.str());
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  auto s = std::make_shared<Storage>();
  s->nbytes = nbytes;
  s->device = device;
  s->data = be->allocate(nbytes, device.index);
  note_allocated(nbytes);
  int idx = device.index;
  s->deleter = [be, idx, nbytes](void* p) {
    be->deallocate(p, idx);
    g_live.fetch_sub(nbytes, std::memory_order_relaxed);
  };
  return s;
}

}  // namespace volt
