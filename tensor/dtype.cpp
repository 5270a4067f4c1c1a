#include <volt/tensor/dtype.h>
#include <volt/tensor/value_range.h>

#include <algorithm>

#include <volt/tensor/error.h>

namespace volt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::b8: return "b8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
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
    // Generated kernels have no arithmetic on these yet: refuse rather than
    // compute on the bits as integers.
    case DType::bf16: case DType::f16:
      VOLT_FAIL("codegen", "generated kernels do not support " << dtype_name(t) << " yet; run it eagerly on the CPU");
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::b8: case DType::u8: return 1;
    case DType::i32: case DType::f32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::i64: case DType::f64: return 8;
  }
  return 0;
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || is_half(t); }

bool is_integral(DType t, bool include_bool) {
  return t == DType::u8 || t == DType::i32 || t == DType::i64 || (include_bool && t == DType::b8);
}

bool holds_value(DType t, double v) {
  if (!is_integral(t)) return true;
  const double lo = t == DType::u8 ? 0.0 : t == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  const double hi = t == DType::u8 ? 256.0 : t == DType::i32 ? 2147483648.0 : 9223372036854775808.0;
  return v >= lo && v < hi;  // NaN fails both
}

ScalarKind scalar_kind(DType t) {
  if (t == DType::b8) return ScalarKind::Bool;
  return is_floating(t) ? ScalarKind::Float : ScalarKind::Int;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) || is_floating(b)) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    // A half type next to an integer or bool keeps its dtype; bf16 with f16,
    // or either with f32, gives f32 (neither holds the other's values).
    if (is_half(a) && !is_floating(b)) return a;
    if (is_half(b) && !is_floating(a)) return b;
    return DType::f32;
  }
  if (a == DType::b8) return b;
  if (b == DType::b8) return a;
  // Integers: the wider one wins (u8 is narrower than both signed types here).
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
}

void fail_half_dispatch(DType t) {
  VOLT_FAIL("dispatch", "a kernel for the six 1-8 byte dtypes was called with " << dtype_name(t)
                                                                               << "; it has no " << dtype_name(t)
                                                                               << " version");
}

}  // namespace volt
