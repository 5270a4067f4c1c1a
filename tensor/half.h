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

// The next 16-bit value from h towards -inf (down) or +inf (up).
template <class H>
H next_half(H h, bool up) {
  const bool neg = h.bits & 0x8000, zero = (h.bits & 0x7FFF) == 0;
  if (zero) return H{uint16_t(up ? 0x0001 : 0x8001)};
  return H{uint16_t(up != neg ? h.bits + 1 : h.bits - 1)};
}

// The H values nearest lo and hi inside [lo, hi): a draw of U[lo, hi) rounded
// to H may reach hi (rand() would give 1) or fall below lo, and is then
// clamped to these (both backends do).
template <class H>
void half_draw_bounds(double lo, double hi, H& bottom, H& top) {
  top = H::from_float(static_cast<float>(hi));
  bottom = H::from_float(static_cast<float>(lo));
  while (top.to_float() >= hi) top = next_half(top, false);
  while (bottom.to_float() < lo) bottom = next_half(bottom, true);
}

}  // namespace volt
