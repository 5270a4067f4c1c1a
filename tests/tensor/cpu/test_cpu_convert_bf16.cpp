// The vector f32 <-> bf16 conversions (tensor/cpu/convert_bf16.h) against the
// scalar rule of tensor/half.inc, bit for bit: ties, carries into the
// exponent, infinities, NaNs of every payload, subnormals; and a tensor's
// .to(kBF16) / .to(kF32), which run them.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include <volt/tensor/cpu/convert_bf16.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>

using namespace volt;
using namespace volt::cpu;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every pattern of the upper 16 bits (each sign, exponent, NaN and subnormal
// class) with low halves at and around the rounding boundaries, then random ones.
std::vector<float> patterns() {
  std::vector<float> v;
  const uint32_t lows[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) v.push_back(from_bits(hi << 16 | lo));
  std::mt19937 gen(31);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(uint32_t(gen())));
  return v;
}

}  // namespace

TEST_CASE("bf16 conversion: the vector rounding equals the scalar rule on every class of f32") {
  if (!convert_bf16_vectorised()) MESSAGE("no AVX-512F: the scalar loop runs (checked all the same)");
  const std::vector<float> src = patterns();
  std::vector<BF16> got(src.size());
  f32_to_bf16(src.data(), got.data(), int64_t(src.size()));
  int bad = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t want = BF16::from_float(src[i]).bits;
    if (got[i].bits != want && ++bad <= 5) {
      uint32_t u;
      std::memcpy(&u, &src[i], 4);
      FAIL_CHECK("f32 bits 0x" << std::hex << u << " -> 0x" << got[i].bits << ", the scalar rule 0x" << want);
    }
  }
  CHECK(bad == 0);
  // Every length up to 70 from an odd offset: the masked tails write only n values.
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<BF16> out(size_t(n) + 2, BF16{0xABCD});
    f32_to_bf16(src.data() + 3 + 7 * 4, out.data() + 1, n);
    CHECK(out[0].bits == 0xABCD);
    CHECK(out[size_t(n) + 1].bits == 0xABCD);
    for (int64_t i = 0; i < n; ++i) CHECK(out[size_t(i) + 1].bits == BF16::from_float(src[size_t(3 + 28 + i)]).bits);
  }
}

TEST_CASE("bf16 conversion: widening every bf16 pattern is exact, tails included") {
  std::vector<BF16> all(0x10000 + 13);
  for (size_t i = 0; i < all.size(); ++i) all[i].bits = uint16_t(i * 40503u);  // odd multiplier: all patterns
  std::vector<float> got(all.size() + 1, 1.5f);
  bf16_to_f32(all.data(), got.data(), int64_t(all.size()));
  int bad = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t g;
    std::memcpy(&g, &got[i], 4);
    bad += g != uint32_t(all[i].bits) << 16;
  }
  CHECK(bad == 0);
  CHECK(got.back() == 1.5f);
}

TEST_CASE("bf16 conversion: Tensor::to between f32 and bf16 takes the same bits, contiguous or not") {
  const std::vector<float> src = patterns();
  const int64_t n = 1 << 17;  // several chunks for the threads
  const Tensor f = Tensor::from_vector(std::vector<float>(src.begin(), src.begin() + n), {n / 64, 64});
  for (const Tensor& t : {f, f.t()}) {
    CAPTURE(t.is_contiguous());
    const Tensor b = t.to(kBF16).contiguous();
    const std::vector<float> want = t.contiguous().to_vector<float>();
    const BF16* got = static_cast<const BF16*>(b.raw_data());
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got[i].bits != BF16::from_float(want[size_t(i)]).bits;
    CHECK(bad == 0);
    // And back: exact.
    const std::vector<float> back = b.to(kF32).to_vector<float>();
    int off = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &back[size_t(i)], 4);
      off += u != uint32_t(got[i].bits) << 16;
    }
    CHECK(off == 0);
  }
}
