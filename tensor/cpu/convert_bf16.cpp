// The vector f32 <-> bf16 conversions of tensor/cpu/convert_bf16.h.  The
// rounding is tensor/half.inc's volt_f32_to_bf16 written over 16 lanes:
//   NaN (|u| > 0x7F800000):  (u >> 16) | 0x0040
//   otherwise:               (u + 0x7FFF + ((u >> 16) & 1)) >> 16
#include <volt/tensor/cpu/convert_bf16.h>

#include <immintrin.h>

namespace volt::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define VOLT_CONVERT_X86 1
#endif

#ifdef VOLT_CONVERT_X86
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#endif

// 16 f32 bit patterns -> their 16 bf16 patterns, in the low half of each lane.
inline __m512i round16(__m512i u) {
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

void narrow_avx512(const float* src, BF16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = round16(_mm512_loadu_si512(src + i));
    const __m512i b = round16(_mm512_loadu_si512(src + i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), _mm512_cvtepi32_epi16(b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = __mmask16(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m512i a = round16(_mm512_maskz_loadu_epi32(m, src + i));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, a);
  }
}

void widen_avx512(const BF16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // VOLT_CONVERT_X86

bool has_avx512() {
#ifdef VOLT_CONVERT_X86
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace

bool convert_bf16_vectorised() { return has_avx512(); }

void f32_to_bf16(const float* src, BF16* dst, int64_t n) {
#ifdef VOLT_CONVERT_X86
  if (has_avx512()) return narrow_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16::from_float(src[i]);
}

void bf16_to_f32(const BF16* src, float* dst, int64_t n) {
#ifdef VOLT_CONVERT_X86
  if (has_avx512()) return widen_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i].to_float();
}

}  // namespace volt::cpu
