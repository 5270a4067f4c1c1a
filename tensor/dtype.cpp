#include <volt/tensor/dtype.h>

#include <algorithm>

namespace volt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::b8: return "b8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "?";
}

const char* dtype_c_type(DType t) {
  switch (t) {
    case DType::b8: return "bool";
    case DType::u8: return "unsigned char";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::f32: return "float";
    case DType::f64: return "double";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::b8: case DType::u8: return 1;
    case DType::i32: case DType::f32: return 4;
    case DType::i64: case DType::f64: return 8;
  }
  return 0;
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

bool is_integral(DType t, bool include_bool) {
  return t == DType::u8 || t == DType::i32 || t == DType::i64 || (include_bool && t == DType::b8);
}

ScalarKind scalar_kind(DType t) {
  if (t == DType::b8) return ScalarKind::Bool;
  return is_floating(t) ? ScalarKind::Float : ScalarKind::Int;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) || is_floating(b)) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    return DType::f32;
  }
  if (a == DType::b8) return b;
  if (b == DType::b8) return a;
  // Integers: the wider one wins (u8 is narrower than both signed types here).
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
}

}  // namespace volt
