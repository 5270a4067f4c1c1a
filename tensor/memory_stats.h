// Bytes of tensor storage: how many were ever allocated, how many are live,
// and the most that were live at once since the last reset (all devices).
//
//   volt::reset_storage_peak();
//   run();
//   volt::StorageBytes b = volt::storage_bytes();   // b.peak_live - live before: run's working set
#pragma once
#include <cstdint>

namespace volt {

struct StorageBytes {
  uint64_t allocated = 0;  // the sum of every Storage::allocate's size so far
  uint64_t live = 0;       // allocated and not yet freed
  uint64_t peak_live = 0;  // the largest `live` since reset_storage_peak()
};

StorageBytes storage_bytes();
// Starts the peak again from what is live now.
void reset_storage_peak();

// Bytes of freed large CPU blocks (64 KiB and up) that the allocator keeps for
// tensors of the same size.  Those of sizes nobody asks for any more are given
// back, the longest-waiting first, when a request the cache cannot serve
// comes, so that memory in use plus this does not grow while it holds them
// (tensor/cpu/backend.cpp).
uint64_t cpu_cached_bytes();

}  // namespace volt
