// The CUDA caching allocator.  cudaMalloc and cudaFree synchronise the device
// and cost tens of microseconds, more than a whole training step at batch 8,
// so freed blocks are kept in size-class free lists (per device; there is one
// stream per device, so a block freed by one kernel can be handed to the next
// request without waiting) and reused.  In the steady state of a training loop
// no cudaMalloc happens at all; the counters below let a test check that.
//
//   auto s = volt::cuda::memory_stats(0);
//   // s.allocated: bytes held by live tensors; s.reserved: bytes obtained from
//   // cudaMalloc (live + cached); s.peak: the largest `allocated` seen
//   volt::cuda::empty_cache();   // gives cached blocks back to the driver
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace volt::cuda {

struct MemoryStats {
  size_t allocated = 0;  // bytes in blocks handed out (rounded to the size class)
  size_t reserved = 0;   // bytes obtained from cudaMalloc and not yet freed
  size_t peak = 0;       // high-water mark of `allocated`
  int64_t malloc_calls = 0;  // cudaMalloc calls since start (or reset_counters)
  int64_t free_calls = 0;    // cudaFree calls
  std::string str() const;
};

void* device_allocate(size_t nbytes, int device);
void device_free(void* p, int device);
MemoryStats memory_stats(int device = 0);
void reset_peak(int device = 0);
// Frees every cached (unused) block of every device.
void empty_cache();

// A private pool, for the time a CUDA graph is captured (tensor/cuda/graph.h):
// while one is active on a device, every block handed out there belongs to it
// and, freed, returns to it (never to the shared cache), so memory a graph
// replays into is never given to anyone else.  End it when capture ends;
// release it when the graph is gone (its blocks go back to the shared cache).
int64_t begin_private_pool(int device);
void end_private_pool(int device);
void release_private_pool(int device, int64_t pool);

// The size a request is rounded up to: 512-byte steps below 1 MiB, then
// powers of two with three steps in between (2 MiB, 2.5, 3, 3.5, 4, ...).
size_t size_class(size_t nbytes);

}  // namespace volt::cuda
