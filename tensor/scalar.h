// A Python-style number: an argument like the 2.0 in `a * 2.0` or the 0.0 in
// `prims.gt(t0, 0.0)`.  It keeps its kind (bool/int/float) for type promotion.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include <volt/tensor/dtype.h>

namespace volt {

struct Scalar {
  double value = 0;
  ScalarKind kind = ScalarKind::Float;

  Scalar() = default;
  Scalar(bool v) : value(v), kind(ScalarKind::Bool) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : value(static_cast<double>(v)), kind(ScalarKind::Int) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : value(static_cast<double>(v)), kind(ScalarKind::Float) {}

  // The dtype a scalar of this kind takes on its own: bool -> b8, int -> i64, float -> f32.
  DType default_dtype() const;
  // Printed as Python prints it: 0.0, 0.9, 1.1111111111111112, 3, True.
  std::string repr() const;
};

// Shortest decimal that reads back as the same double, Python style ("1.0", "0.9").
std::string python_float_repr(double v);

}  // namespace volt
