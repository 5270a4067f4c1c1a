// bf16 and f16: conversions over every bit pattern against reference functions
// written from the formats' definitions, promotion, printing, creation, to() and
// item().
#include <doctest/doctest.h>

#include "tests/tensor/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using volt::testing::bits16;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// An f32's value from its bits: volt's CPU backend sets flush-to-zero and
// denormals-are-zero, under which a plain float -> double conversion reads a
// subnormal f32 as 0.
double exact(float f) {
  const uint32_t u = bits_of(f);
  const int e = (u >> 23) & 0xFF;
  const double sign = (u >> 31) ? -1.0 : 1.0;
  const uint32_t m = u & 0x7FFFFF;
  if (e == 0xFF) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), -149);
  return sign * std::ldexp(double(m | 0x800000), e - 150);
}

// The value of a 16-bit pattern with `eb` exponent bits (bias 2^(eb-1) - 1) and
// 15 - eb mantissa bits, from the definition; NaN for every NaN pattern.
double ref_value(uint16_t h, int eb) {
  const int mb = 15 - eb, bias = (1 << (eb - 1)) - 1;
  const int e = (h >> mb) & ((1 << eb) - 1);
  const int m = h & ((1 << mb) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << eb) - 1) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - mb);
  return sign * std::ldexp(m + (1 << mb), e - bias - mb);
}
double ref_bf16(uint16_t h) { return ref_value(h, 8); }
double ref_f16(uint16_t h) { return ref_value(h, 5); }

// Nearest pattern to x among the non-negative finite patterns of a format (and
// Inf, ranked as the next power of two as IEEE 754 rounds), ties to the even
// pattern: a search over the sorted table, no bit tricks.
uint16_t ref_round(double x, double (*value)(uint16_t), uint16_t inf_bits) {
  static std::vector<std::pair<double, uint16_t>> bf_table, f16_table;
  auto& table = value == ref_bf16 ? bf_table : f16_table;
  if (table.empty()) {
    for (uint32_t h = 0; h <= inf_bits; ++h) table.push_back({value(uint16_t(h)), uint16_t(h)});
    // Inf ranks as max + one ulp of the top binade.
    table.back().first = 2 * table[inf_bits - 1].first - table[inf_bits - 2].first;
  }
  if (std::isnan(x)) return 0x7FFF;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= table.back().first) return sign | inf_bits;
  auto hi = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t(0)));
  if (hi->first == a) return sign | hi->second;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1) ? hi->second : lo->second);
}

bool is_nan_bits(uint16_t h, int eb) {
  const int mb = 15 - eb;
  return ((h >> mb) & ((1 << eb) - 1)) == (1 << eb) - 1 && (h & ((1 << mb) - 1));
}

// Every pattern: to f32 exact, back to the same pattern; NaN stays NaN, quiet, same sign.
template <class H>
void check_all_patterns(int eb) {
  const uint16_t quiet = uint16_t(1) << (15 - eb - 1);
  int failures = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = H{h}.to_float();
    const uint16_t back = H::from_float(f).bits;
    const double want = ref_value(h, eb);
    bool ok;
    if (is_nan_bits(h, eb)) ok = std::isnan(f) && is_nan_bits(back, eb) && (back & quiet) && (back & 0x8000) == (h & 0x8000);
    else ok = exact(f) == want && std::signbit(f) == std::signbit(want) && back == h;
    if (!ok && ++failures < 5) FAIL_CHECK("pattern 0x" << std::hex << i << " -> " << f << " -> 0x" << back);
  }
  CHECK(failures == 0);
}

// f32 -> 16 bits against ref_round over random floats, the midpoints between
// neighbouring 16-bit values, and the values next to them.
template <class H>
void check_rounding(double (*value)(uint16_t), uint16_t inf_bits) {
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, 3.4e38f, 1e-45f, -1e-45f};
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) xs.push_back(float_of(gen()));
  for (uint32_t h = 0; h + 1 < inf_bits; h += 7) {
    const double mid = (value(uint16_t(h)) + value(uint16_t(h + 1))) / 2;
    // bf16 midpoints from their bits: a cast would flush the subnormal ones.
    const float m = std::is_same_v<H, BF16> ? float_of((h << 16) | 0x8000u) : static_cast<float>(mid);
    if (exact(m) != mid) continue;  // not an f32: the tie cannot be met from f32
    xs.insert(xs.end(), {m, -m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)});
  }
  int failures = 0;
  for (float x : xs) {
    const uint16_t got = H::from_float(x).bits;
    const uint16_t want = ref_round(exact(x), value, inf_bits);
    const bool ok = std::isnan(x) ? (got & 0x7FFF) > inf_bits : got == want;
    if (!ok && ++failures < 5) FAIL_CHECK("f32 0x" << std::hex << bits_of(x) << " gave 0x" << got << ", want 0x" << want);
  }
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("bf16: every bit pattern converts to f32 and back exactly") { check_all_patterns<BF16>(8); }
TEST_CASE("f16: every bit pattern converts to f32 and back exactly") { check_all_patterns<F16>(5); }
TEST_CASE("bf16: f32 rounds to the nearest bf16, ties to even") { check_rounding<BF16>(ref_bf16, 0x7F80); }
TEST_CASE("f16: f32 rounds to the nearest f16, ties to even, overflow to inf, subnormals exact") {
  check_rounding<F16>(ref_f16, 0x7C00);
  CHECK(F16::from_float(0x1p-24f).bits == 0x0001);   // the smallest subnormal
  CHECK(F16::from_float(0x1p-25f).bits == 0x0000);   // half of it: a tie, to even (0)
  CHECK(F16::from_float(0x1.8p-24f).bits == 0x0002); // 1.5 units: a tie, to even (2)
  CHECK(F16::from_float(65520.0f).bits == 0x7C00);
  CHECK(BF16::from_float(float_of(0x7F7FFFFF)).bits == 0x7F80);  // FLT_MAX rounds up to inf
}

TEST_CASE("bf16 and f16 promotion follows PyTorch's table") {
  const DType bf = DType::bf16, h = DType::f16;
  CHECK(promote_types(bf, h) == DType::f32);
  CHECK(promote_types(bf, DType::f32) == DType::f32);
  CHECK(promote_types(h, DType::f32) == DType::f32);
  CHECK(promote_types(bf, DType::f64) == DType::f64);
  CHECK(promote_types(h, DType::f64) == DType::f64);
  for (DType i : {DType::b8, DType::u8, DType::i32, DType::i64}) {
    CHECK(promote_types(bf, i) == bf);
    CHECK(promote_types(i, h) == h);
  }
  CHECK(promote_types(bf, bf) == bf);
  Tensor a = ones({2}, bf), b = ones({2}, h);
  CHECK(add(a, b).dtype() == DType::f32);
  CHECK(add(a, ones({2}, DType::i32)).dtype() == bf);
  CHECK(add(ones({2}, DType::i64), b).dtype() == h);
  CHECK(mul(a, 2.5).dtype() == bf);                  // a Python-like float does not promote
  CHECK(mul(b, 3).dtype() == h);
  CHECK(add(a, ones({}, DType::f32)).dtype() == bf);  // nor does a zero-dim tensor of the same kind
  CHECK(add(ones({}, bf), ones({2}, DType::i32)).dtype() == bf);  // a higher kind does
  CHECK(add(a, ones({2}, DType::f32)).dtype() == DType::f32);
  CHECK(div(ones({2}, DType::i32), ones({2}, bf)).dtype() == bf);
  CHECK(lt(a, b).dtype() == DType::b8);
  CHECK(dtype_name(bf) == std::string("bf16"));
  CHECK(dtype_name(h) == std::string("f16"));
  CHECK(dtype_size(bf) == 2);
  CHECK(is_floating(h));
}

TEST_CASE("bf16 and f16 tensors print their values and dtype") {
  CHECK(to_string(full({3}, 1.0 / 3, kBF16)) == "tensor([0.3340, 0.3340, 0.3340], dtype=bf16)");
  CHECK(to_string(tensor({1.f, 2.5f, -4.f}).to(kF16)) == "tensor([ 1.0000,  2.5000, -4.0000], dtype=f16)");
  CHECK(to_string(tensor({1.f, 2.f}).to(kBF16)) == "tensor([1., 2.], dtype=bf16)");
  CHECK(to_string(full({2}, 1e6, kF16)) == "tensor([inf, inf], dtype=f16)");
  CHECK(to_string(full({}, 257.0, kBF16)) == "tensor(256., dtype=bf16)");  // 257 rounds to even
}

TEST_CASE("bf16 and f16 creation, item and to()") {
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    CHECK(zeros({2, 3}, dt).dtype() == dt);
    CHECK(bits16(zeros({3}, dt)) == std::vector<uint16_t>(3, 0));
    CHECK(bits16(ones({2}, dt)) == std::vector<uint16_t>(2, dt == kBF16 ? 0x3F80 : 0x3C00));
    CHECK(full({}, 1.5, dt).item<float>() == 1.5f);
    CHECK(full({}, -0.1, dt).item<double>() == ref_value(dt == kBF16 ? BF16::from_float(-0.1f).bits : F16::from_float(-0.1f).bits, dt == kBF16 ? 8 : 5));
    // to() rounds each element as the reference does, from any strides.
    manual_seed(3);
    Tensor x = mul(randn({5, 7}), 100.0).t();
    Tensor y = x.to(dt);
    std::vector<float> xv = x.contiguous().to_vector<float>();
    std::vector<uint16_t> yb = bits16(y);
    for (size_t i = 0; i < xv.size(); ++i)
      CHECK(yb[i] == ref_round(exact(xv[i]), dt == kBF16 ? ref_bf16 : ref_f16, dt == kBF16 ? 0x7F80 : 0x7C00));
    // Back to f32 exactly; between the two 16-bit types through f32.
    std::vector<float> back = y.to(kF32).to_vector<float>();
    for (size_t i = 0; i < back.size(); ++i) CHECK(exact(back[i]) == ref_value(yb[i], dt == kBF16 ? 8 : 5));
    Tensor other = y.to(dt == kBF16 ? kF16 : kBF16);
    CHECK(other.to(kF32).to_vector<float>() == y.to(kF32).to(other.dtype()).to(kF32).to_vector<float>());
    // Into a strided view of the same dtype: the bits move as they are.
    Tensor dst = zeros({5, 7}, dt);
    dst.t().copy_(y.contiguous());
    CHECK(bits16(dst.t()) == yb);
  }
}

TEST_CASE("rand and randn in bf16 and f16 are the f32 draws rounded once; rand stays below 1") {
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    // The largest value below 1: 1 - 2^-9 in bf16, 1 - 2^-11 in f16.
    const uint16_t below_one = dt == kBF16 ? 0x3F7F : 0x3BFF;
    manual_seed(11);
    const Tensor draws = rand({100000});
    const Tensor want_n = randn({3, 33}).to(dt);
    manual_seed(11);
    const Tensor u = rand({100000}, dt), n = randn({3, 33}, dt);
    CHECK(u.dtype() == dt);
    CHECK(n.dtype() == dt);
    CHECK(bits16(n) == bits16(want_n));
    // Each draw rounded to nearest, except those that would round up to 1.
    const std::vector<float> d = draws.to_vector<float>();
    const std::vector<uint16_t> ub = bits16(u);
    int moved = 0, bad = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const uint16_t r = ref_round(exact(d[i]), dt == kBF16 ? ref_bf16 : ref_f16, dt == kBF16 ? 0x7F80 : 0x7C00);
      const uint16_t want = r == (dt == kBF16 ? 0x3F80 : 0x3C00) ? below_one : r;
      moved += r != want;
      bad += ub[i] != want;
    }
    CHECK(bad == 0);
    CHECK(moved > 0);  // the sample does meet draws that round to 1
    // In another range too: [-3, -1) keeps away from -1.
    const std::vector<float> v = uniform({20000}, -3.0, -1.0, dt, kCPU).to(kF32).to_vector<float>();
    CHECK(*std::max_element(v.begin(), v.end()) < -1.0f);
    CHECK(*std::min_element(v.begin(), v.end()) >= -3.0f);
  }
  CHECK_THROWS_WITH_AS(randint(0, 5, {3}, kBF16), doctest::Contains("randint"), volt::Error);
}
