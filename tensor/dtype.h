// Element types.  Names print as Thunder prints them: f32, f64, i32, i64, u8, b8,
// bf16, f16.  bf16 and f16 hold the bits of tensor/half.h; kernels compute on
// them in f32 and round once when they store.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <volt/tensor/half.h>

namespace volt {

enum class DType : uint8_t { b8, u8, i32, i64, f32, f64, bf16, f16 };

constexpr int kNumDTypes = 8;

const char* dtype_name(DType t);        // "f32"
const char* dtype_c_type(DType t);      // "float": the C type used by generated kernels
size_t dtype_size(DType t);
bool is_floating(DType t);
bool is_integral(DType t, bool include_bool = false);
DType promote_types(DType a, DType b);  // PyTorch's table for these eight types
// bf16 or f16: two-byte floats that the CPU kernels widen to f32 to compute.
inline bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// Scalar kinds for promotion with Python-style numbers: a double scalar next to an
// integer tensor gives the default float type (f32), an int next to a bool gives i64.
enum class ScalarKind : uint8_t { Bool, Int, Float };
ScalarKind scalar_kind(DType t);

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<BF16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<F16> { static constexpr DType value = DType::f16; };

// A kernel written for the six dtypes met bf16 or f16: they go through f32
// instead (tensor/cpu/half.cpp); reaching here is a missing case, not bad input.
[[noreturn]] void fail_half_dispatch(DType t);

// Calls f(T{}) with T the C++ type of `t`; bf16 and f16 throw (fail_half_dispatch).
#define VOLT_DISPATCH_DTYPE(t, ...)                                        \
  [&] {                                                                    \
    switch (t) {                                                           \
      case ::volt::DType::b8: { using scalar_t = bool; return __VA_ARGS__(); }     \
      case ::volt::DType::u8: { using scalar_t = uint8_t; return __VA_ARGS__(); }  \
      case ::volt::DType::i32: { using scalar_t = int32_t; return __VA_ARGS__(); } \
      case ::volt::DType::i64: { using scalar_t = int64_t; return __VA_ARGS__(); } \
      case ::volt::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }   \
      case ::volt::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }  \
      case ::volt::DType::bf16:                                            \
      case ::volt::DType::f16: ::volt::fail_half_dispatch(t);              \
    }                                                                      \
    using scalar_t = float;                                                \
    return __VA_ARGS__();                                                  \
  }()

}  // namespace volt
