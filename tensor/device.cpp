#include <volt/tensor/device.h>

#include <volt/tensor/error.h>

#include <ostream>

namespace volt {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "lazy") return lazy();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return cuda(std::stoi(s.substr(5)));
    } catch (const std::exception&) {
    }
  }
  VOLT_FAIL("Device", "cannot parse '" << s << "' (expected cpu, cuda, cuda:N or lazy)");
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda:" + std::to_string(index);
    case DeviceType::Lazy: return "lazy";
  }
  return "?";
}

#ifndef VOLT_WITH_CUDA
// Without the toolkit there is no CUDA backend (tensor/cuda/runtime.cpp defines these otherwise).
namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
}  // namespace cuda
#endif

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << Device(t).str(); }

}  // namespace volt
