#include <volt/tensor/storage.h>

#include <cstdint>
#include <atomic>

#include <volt/tensor/backend.h>
#include <volt/tensor/error.h>

namespace volt {

namespace {
std::atomic<uint64_t> g_allocations{0};
}

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
  int idx = device.index;
  s->deleter = [be, idx](void* p) { be->deallocate(p, idx); };
  return s;
}

}  // namespace volt
