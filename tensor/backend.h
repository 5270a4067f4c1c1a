// The small interface a device provides: allocate, copy, run a prim, synchronise.
#pragma once
#include <cstddef>
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* p, int device_index) = 0;
  // Copies src (any device, any strides) into dst (this device, same shape and dtype).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // Runs a prim whose outputs have already been allocated (views excepted).
  virtual void run(const OpCall& call, std::vector<Tensor>& outputs) = 0;
  // Composite ops the device runs as one fused kernel in eager mode, through
  // run() (cross_entropy and cross_entropy_backward; tensor/cross_entropy.inc).
  virtual bool fuses(OpId op) const {
    (void)op;
    return false;
  }
  virtual void synchronize() {}
};

Backend* backend_for(DeviceType type);  // null if the device has no backend in this build
void register_backend(DeviceType type, Backend* backend);
// A backend decided on first use: `fn` is asked once, by the first
// backend_for(type), and its answer (null: none) kept.
using BackendProvider = Backend* (*)();
void register_backend_provider(DeviceType type, BackendProvider fn);

}  // namespace volt
