// A device is a value: cpu, cuda:N, or lazy (records a graph instead of running).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace volt {

enum class DeviceType : uint8_t { CPU, CUDA, Lazy };

// As LibTorch's: kCPU and kCUDA are device types, and a device is one with an
// index (Device(kCUDA, 1)); a device type converts to its device 0.
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}

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

std::ostream& operator<<(std::ostream& os, const Device& d);  // as str()
std::ostream& operator<<(std::ostream& os, DeviceType t);     // as Device(t).str()

inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kLazy = DeviceType::Lazy;

namespace cuda {
// Whether this build has the CUDA backend and this machine a usable GPU and
// driver.  False (never an error) on a machine without either.
bool is_available();
int device_count();
}  // namespace cuda

}  // namespace volt
