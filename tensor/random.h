// The global random generator: Philox4x32-10 keyed by (seed, offset).  Element i
// of a draw uses counter offset + i, so a draw is a pure function of
// (seed, offset, i) and the same on every device.  Each draw advances the
// offset by its number of elements.
#pragma once
#include <cstdint>

namespace volt {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

void manual_seed(uint64_t seed);  // sets the seed and resets the offset to 0
PhiloxState rng_state();
void set_rng_state(PhiloxState s);
// Reserves n counters and returns the state to use for them.
PhiloxState rng_reserve(uint64_t n);

// One Philox4x32-10 block: counter (4 words) and key (2 words) -> 4 words.
void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
// The uniform float in [0, 1) for element i of a draw, exactly as kernels compute it.
float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i);
double philox_uniform_f64(uint64_t seed, uint64_t offset, uint64_t i);
// Standard normal for element i (Box-Muller on two words of the same block).
double philox_normal(uint64_t seed, uint64_t offset, uint64_t i);
// lo + (hi - lo) * u, the exact expression of the `uniform` prim on every device.
float philox_uniform_range_f32(uint64_t seed, uint64_t offset, uint64_t i, float lo, float hi);
double philox_uniform_range_f64(uint64_t seed, uint64_t offset, uint64_t i, double lo, double hi);

}  // namespace volt
