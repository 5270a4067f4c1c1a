// A device is a value: cpu, cuda:N, or lazy (records a graph instead of running).
#pragma once
#include <cstdint>
#include <string>

namespace volt {

enum class DeviceType : uint8_t { CPU, CUDA, Lazy };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  static Device lazy() { return {DeviceType::Lazy, 0}; }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1", "lazy"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_lazy() const { return type == DeviceType::Lazy; }
  std::string str() const;  // "cpu", "cuda:0", "lazy"
  bool operator==(const Device&) const = default;
};

inline const Device kCPU = Device::cpu();
inline const Device kLazy = Device::lazy();

namespace cuda {
// Whether this build has the CUDA backend and this machine a usable GPU and
// driver.  False (never an error) on a machine without either.
bool is_available();
int device_count();
}  // namespace cuda

}  // namespace volt
