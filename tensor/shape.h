// Shapes and strides: vectors of int64 with a type of volt's own, so that
// `std::cout << t.sizes()` finds its printer (tensor/factories.h) by argument-
// dependent lookup, as LibTorch's IntArrayRef does; helpers for the arithmetic on them.
#pragma once
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace volt {

// Everything a std::vector<int64_t> does; converts to and from one implicitly.
struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}
  Shape(std::vector<int64_t>&& v) : std::vector<int64_t>(std::move(v)) {}
};

// Both check every product: a shape whose element count (or a stride) does not
// fit in int64 is an error naming `op`.
int64_t shape_numel(const Shape& s, const char* op = "shape");
Shape contiguous_strides(const Shape& s, const char* op = "shape");
// a * b, or an error naming `op` and the shape `s` when the product overflows.
int64_t checked_mul(int64_t a, int64_t b, const Shape& s, const char* op);
std::string shape_str(const Shape& s);  // "[8, 784]"
std::ostream& operator<<(std::ostream& os, const Shape& s);  // as shape_str

// The dims a reduction runs over, spelled as LibTorch's IntArrayRef takes them:
// t.sum(1), t.sum({0, 2}), t.sum(dims_vector); empty (t.sum()) is every dim.
class Dims {
 public:
  Dims() = default;
  template <std::integral I>
    requires(!std::is_same_v<I, bool>)
  Dims(I d) : v_{static_cast<int64_t>(d)} {}  // any integer type: t.sum(1), t.sum(size_t{1})
  Dims(std::initializer_list<int64_t> d) : v_(d) {}
  Dims(const std::vector<int64_t>& d) : v_(d) {}
  const std::vector<int64_t>& vec() const { return v_; }

 private:
  std::vector<int64_t> v_;
};
// NumPy broadcasting of two shapes; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); errors name `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace volt
