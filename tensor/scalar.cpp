#include <volt/tensor/scalar.h>

#include <charconv>
#include <cmath>

namespace volt {

DType Scalar::default_dtype() const {
  switch (kind) {
    case ScalarKind::Bool: return DType::b8;
    case ScalarKind::Int: return DType::i64;
    case ScalarKind::Float: return DType::f32;
  }
  return DType::f32;
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string Scalar::repr() const {
  switch (kind) {
    case ScalarKind::Bool: return value != 0 ? "True" : "False";
    case ScalarKind::Int: return std::to_string(static_cast<long long>(value));
    case ScalarKind::Float: return python_float_repr(value);
  }
  return "?";
}

}  // namespace volt
