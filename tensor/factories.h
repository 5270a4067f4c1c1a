// Free factory functions and stream operators, as a LibTorch program spells them.
//
//   Tensor w = volt::randn({784, 10});             // torch::randn({784, 10})
//   Tensor b = volt::zeros({10}, volt::kF32);       // torch::zeros({10}, torch::kFloat32)
//   Tensor v = volt::tensor({1.f, 2.f, 3.f});       // torch::tensor({1., 2., 3.})
//   std::cout << w.dtype() << " " << w.device() << " " << volt::shape_str(w.sizes());  // f32 cpu [784, 10]
//
// Each is the static Tensor:: factory of the same name (tensor/tensor.h).
#pragma once
#include <functional>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <type_traits>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt {

inline constexpr DType kBool = DType::b8;
inline constexpr DType kU8 = DType::u8;
inline constexpr DType kI32 = DType::i32;
inline constexpr DType kI64 = DType::i64;
inline constexpr DType kF32 = DType::f32;
inline constexpr DType kF64 = DType::f64;
inline constexpr DType kBF16 = DType::bf16;
inline constexpr DType kF16 = DType::f16;
// LibTorch's names for the same dtypes.
inline constexpr DType kByte = DType::u8;
inline constexpr DType kUInt8 = DType::u8;
inline constexpr DType kInt = DType::i32;
inline constexpr DType kInt32 = DType::i32;
inline constexpr DType kLong = DType::i64;
inline constexpr DType kInt64 = DType::i64;
inline constexpr DType kFloat = DType::f32;
inline constexpr DType kFloat32 = DType::f32;
inline constexpr DType kDouble = DType::f64;
inline constexpr DType kFloat64 = DType::f64;
inline constexpr DType kBFloat16 = DType::bf16;
inline constexpr DType kHalf = DType::f16;
inline constexpr DType kFloat16 = DType::f16;

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

// A 1-D tensor of the given values: f32 from floats, f64 from doubles, i64
// from integers.  A template, so that a nested list ({{1}, {2}}) is never
// read as a flat one and goes to the NestedList overload below.
template <class T>
  requires std::is_arithmetic_v<T>
inline Tensor tensor(std::initializer_list<T> v) {
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bool>)
    return Tensor::from_vector(std::vector<T>(v));
  else
    return Tensor::from_vector(std::vector<int64_t>(v.begin(), v.end()));
}

// A number or a list of NestedLists: what `volt::tensor({{1, 2}, {3, 4}})` is
// built from.  Integers make an i64 tensor, any floating number an f32 one,
// unless a dtype is given; ragged lists are an error naming the level.
class NestedList {
 public:
  NestedList(int v) : value_(v) {}
  NestedList(long v) : value_(static_cast<double>(v)) {}
  NestedList(long long v) : value_(static_cast<double>(v)) {}
  NestedList(float v) : value_(v), floating_(true) {}
  NestedList(double v) : value_(v), floating_(true) {}
  NestedList(std::initializer_list<NestedList> items) : items_(items), leaf_(false) {}
  bool is_leaf() const { return leaf_; }
  bool floating() const { return floating_; }
  double value() const { return value_; }
  const std::vector<NestedList>& items() const { return items_; }

 private:
  double value_ = 0;
  std::vector<NestedList> items_;
  bool floating_ = false;
  bool leaf_ = true;
};

//   volt::tensor({{1, 2}, {3, 4}})            // i64 [2, 2]
//   volt::tensor({{1.5, 2}, {3, 4}})          // f32 [2, 2]
//   volt::tensor({{{1}, {2}}}, volt::kF64)    // f64 [1, 2, 1]
Tensor tensor(const NestedList& values, std::optional<DType> dtype = std::nullopt);

// Wraps memory the caller owns, without copying: sizes (and strides, in
// elements; contiguous when not given).  With a deleter, the last tensor
// viewing the memory calls deleter(data); without, the caller frees it after
// the tensors are gone.
//   float buf[6];  Tensor t = volt::from_blob(buf, {2, 3});   // f32 [2, 3] over buf
Tensor from_blob(void* data, const Shape& sizes, DType dtype = DType::f32, Device device = kCPU);
Tensor from_blob(void* data, const Shape& sizes, std::function<void(void*)> deleter, DType dtype = DType::f32,
                 Device device = kCPU);
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, std::function<void(void*)> deleter = {},
                 DType dtype = DType::f32, Device device = kCPU);

// A random permutation of 0 .. n-1 from volt's generator (manual_seed makes it
// repeat); it advances the generator as rand({n}) does.
Tensor randperm(int64_t n, DType dtype = DType::i64, Device device = kCPU);

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace volt
