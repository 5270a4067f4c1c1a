// Whether this test binary is the sanitizer build (tests/sanitize.sh:
// AddressSanitizer and UndefinedBehaviorSanitizer at -O1). There every step
// runs 10 to 50 times slower, so a case that repeats one check over many
// settings runs a subset of them that still takes every code path (each
// instruction set, a split over threads); the ordinary run keeps them all.
#pragma once

namespace volt::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace volt::testing
