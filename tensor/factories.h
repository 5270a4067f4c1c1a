// Free factory functions and stream operators, as a LibTorch program spells them.
//
//   Tensor w = volt::randn({784, 10});             // torch::randn({784, 10})
//   Tensor b = volt::zeros({10}, volt::kF32);       // torch::zeros({10}, torch::kFloat32)
//   Tensor v = volt::tensor({1.f, 2.f, 3.f});       // torch::tensor({1., 2., 3.})
//   std::cout << w.dtype() << " " << w.device() << " " << volt::shape_str(w.sizes());  // f32 cpu [784, 10]
//
// Each is the static Tensor:: factory of the same name (tensor/tensor.h).
#pragma once
#include <initializer_list>
#include <ostream>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt {

inline constexpr DType kBool = DType::b8;
inline constexpr DType kU8 = DType::u8;
inline constexpr DType kI32 = DType::i32;
inline constexpr DType kI64 = DType::i64;
inline constexpr DType kF32 = DType::f32;
inline constexpr DType kF64 = DType::f64;

inline Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::empty(shape, dtype, device);
}
inline Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::zeros(shape, dtype, device);
}
inline Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::ones(shape, dtype, device);
}
inline Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::full(shape, value, dtype, device);
}
inline Tensor arange(double end, DType dtype = DType::i64, Device device = kCPU) {
  return Tensor::arange(end, dtype, device);
}
inline Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64,
                     Device device = kCPU) {
  return Tensor::arange(start, end, step, dtype, device);
}
inline Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::rand(shape, dtype, device);
}
inline Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = kCPU) {
  return Tensor::randn(shape, dtype, device);
}
inline Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64,
                      Device device = kCPU) {
  return Tensor::randint(low, high, shape, dtype, device);
}
inline Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.sizes(), t.dtype(), t.device()); }
inline Tensor ones_like(const Tensor& t) { return Tensor::ones(t.sizes(), t.dtype(), t.device()); }

// A 1-D tensor of the given values: f32 from floats, f64 from doubles, i64 from integers.
inline Tensor tensor(std::initializer_list<float> v) { return Tensor::from_vector(std::vector<float>(v)); }
inline Tensor tensor(std::initializer_list<double> v) { return Tensor::from_vector(std::vector<double>(v)); }
inline Tensor tensor(std::initializer_list<int64_t> v) { return Tensor::from_vector(std::vector<int64_t>(v)); }
inline Tensor tensor(std::initializer_list<int> v) {
  return Tensor::from_vector(std::vector<int64_t>(v.begin(), v.end()));
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
// Shapes are std::vector<int64_t>: found by `using namespace volt;` (or volt::operator<<).
inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

}  // namespace volt
