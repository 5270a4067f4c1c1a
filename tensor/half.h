// bf16 and f16 values on the CPU: the conversions of tensor/half.inc (round to
// nearest even, NaN and Inf kept, subnormals exact) and two storage types that
// hold the bits.  volt's CPU kernels compute on these types in f32 and round
// once when they store, as PyTorch does on the CPU.
//
//   volt::BF16 h = volt::BF16::from_float(1.0f / 3);  // bits 0x3EAB
//   float back = h.to_float();                         // 0.333984375
#pragma once
#include <cstdint>

namespace volt {

#include <volt/tensor/half.inc>

struct BF16 {
  uint16_t bits = 0;
  static BF16 from_float(float f) { return BF16{volt_f32_to_bf16(f)}; }
  float to_float() const { return volt_bf16_to_f32(bits); }
};

struct F16 {
  uint16_t bits = 0;
  static F16 from_float(float f) { return F16{volt_f32_to_f16(f)}; }
  float to_float() const { return volt_f16_to_f32(bits); }
};

static_assert(sizeof(BF16) == 2 && sizeof(F16) == 2);

}  // namespace volt
