// Storage: a block of memory on one device, shared by every view of it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <volt/tensor/device.h>

namespace volt {

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*)> deleter;
  // Bumped by every in-place write through any view (Tensor::copy_ and the ops
  // built on it): autograd compares it with what it was when a tensor was saved.
  uint64_t version = 0;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter && data) deleter(data);
  }

  // Allocates through the device's backend (tensor/backend.h).
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // How many times allocate has been called in this process (all devices).
  static uint64_t allocation_count();
};

}  // namespace volt
