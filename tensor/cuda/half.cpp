// bf16 and f16 draws on the CUDA backend: the bounds the rounded f32 draws
// are clamped to, the same 16-bit values the CPU backend clamps to.
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/half.h>

namespace volt::cuda {

void half_bounds(DType t, double lo, double hi, float& bottom, float& top) {
  VOLT_CHECK(is_half(t), "uniform", "expected bf16 or f16, got " << dtype_name(t));
  if (t == DType::bf16) {
    BF16 b, h;
    half_draw_bounds(lo, hi, b, h);
    bottom = b.to_float(), top = h.to_float();
  } else {
    F16 b, h;
    half_draw_bounds(lo, hi, b, h);
    bottom = b.to_float(), top = h.to_float();
  }
}

}  // namespace volt::cuda
