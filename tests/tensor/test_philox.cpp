// Philox4x32-10: the published known-answer vectors, how rand/randn derive
// from it, distribution moments, and seeding.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  // Salmon et al., SC'11 (Random123's kat_vectors for philox4x32_10).
  const Kat kats[] = {
      {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
       {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) CHECK(out[i] == k.out[i]);
  }
}

namespace {

// Element i of a draw, rebuilt from the block function: counter offset + i, key seed.
void block_at(uint64_t seed, uint64_t offset, uint64_t i, uint32_t out[4]) {
  uint64_t n = offset + i;
  uint32_t ctr[4] = {static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32), 0, 0};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  philox4x32_10(ctr, key, out);
}

struct Moments {
  double mean, var, min, max;
};

Moments moments(const std::vector<double>& v) {
  double s = 0, mn = INFINITY, mx = -INFINITY;
  for (double x : v) {
    s += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  double m = s / v.size(), q = 0;
  for (double x : v) q += (x - m) * (x - m);
  return {m, q / (v.size() - 1), mn, mx};
}

}  // namespace

TEST_CASE("rand is the block's first word, element i at counter offset + i") {
  const uint64_t seed = 0x123456789abcdefULL;
  manual_seed(seed);
  Tensor skip = Tensor::rand({5});  // advances the offset to 5
  Tensor u = Tensor::rand({2, 50});
  auto v = u.to_vector<float>();
  for (uint64_t i = 0; i < 100; ++i) {
    uint32_t out[4];
    block_at(seed, 5, i, out);
    CHECK(v[i] == static_cast<float>(out[0] >> 8) / 16777216.0f);
    CHECK(v[i] == philox_uniform(seed, 5, i));
  }
  // Offsets beyond 2^32 carry into the second counter word.
  uint32_t out[4];
  block_at(7, (uint64_t{1} << 32) - 1, 3, out);
  CHECK(philox_uniform(7, (uint64_t{1} << 32) - 1, 3) == static_cast<float>(out[0] >> 8) / 16777216.0f);
  // randn is Box-Muller on the first two words of the block.
  manual_seed(seed);
  auto n = Tensor::randn({20}, DType::f64).to_vector<double>();
  for (uint64_t i = 0; i < 20; ++i) {
    block_at(seed, 0, i, out);
    double u1 = (out[0] + 1.0) / 4294967296.0, u2 = out[1] / 4294967296.0;
    CHECK(n[i] == doctest::Approx(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2)).epsilon(1e-12));
  }
}

TEST_CASE("rand has the moments of U[0, 1) and stays in [0, 1)") {
  for (DType dt : {DType::f32, DType::f64}) {
    manual_seed(2024);
    auto v = Tensor::rand({100000}, dt).to_vector<double>();
    Moments m = moments(v);
    INFO(dtype_name(dt));
    CHECK(m.mean == doctest::Approx(0.5).epsilon(0.01));   // sd of the mean ~ 0.0009
    CHECK(m.var == doctest::Approx(1.0 / 12).epsilon(0.02));
    CHECK(m.min >= 0.0);
    CHECK(m.max < 1.0);
    CHECK(m.min < 1e-3);
    CHECK(m.max > 1 - 1e-3);
    // Ten equal bins each hold about a tenth (sd ~ 95 per bin).
    std::vector<int> bins(10, 0);
    for (double x : v) bins[static_cast<int>(x * 10)]++;
    for (int b : bins) CHECK(std::abs(b - 10000) < 500);
    // Neighbouring elements are uncorrelated.
    double c = 0;
    for (size_t i = 1; i < v.size(); ++i) c += (v[i] - 0.5) * (v[i - 1] - 0.5);
    CHECK(std::fabs(c / (v.size() - 1) / (1.0 / 12)) < 0.02);
  }
}

TEST_CASE("randn has the moments of N(0, 1)") {
  for (DType dt : {DType::f32, DType::f64}) {
    manual_seed(99);
    auto v = Tensor::randn({100000}, dt).to_vector<double>();
    Moments m = moments(v);
    INFO(dtype_name(dt));
    CHECK(std::fabs(m.mean) < 0.015);  // sd of the mean ~ 0.003
    CHECK(m.var == doctest::Approx(1.0).epsilon(0.025));
    double within1 = 0, skew = 0, kurt = 0;
    for (double x : v) {
      within1 += std::fabs(x) < 1;
      skew += x * x * x;
      kurt += x * x * x * x;
    }
    CHECK(within1 / v.size() == doctest::Approx(0.6827).epsilon(0.01));
    CHECK(std::fabs(skew / v.size()) < 0.05);
    CHECK(kurt / v.size() == doctest::Approx(3.0).epsilon(0.05));
    CHECK(m.min < -3.5);
    CHECK(m.max > 3.5);
  }
}

TEST_CASE("manual_seed makes draws reproducible; the state can be saved and restored") {
  manual_seed(42);
  auto a = Tensor::rand({64}).to_vector<float>();
  auto a2 = Tensor::rand({64}).to_vector<float>();
  manual_seed(42);
  auto b = Tensor::rand({64}).to_vector<float>();
  CHECK(a == b);
  CHECK(a != a2);  // the offset moved on
  manual_seed(43);
  CHECK(Tensor::rand({64}).to_vector<float>() != a);
  // Saving and restoring the state replays the same draw.
  manual_seed(1);
  Tensor::randn({10});
  PhiloxState s = rng_state();
  CHECK(s.seed == 1);
  CHECK(s.offset == 10);
  auto r1 = Tensor::randn({10}).to_vector<float>();
  set_rng_state(s);
  CHECK(Tensor::randn({10}).to_vector<float>() == r1);
  // A draw of n elements equals the concatenation of draws of k and n - k.
  manual_seed(8);
  auto whole = Tensor::rand({10}).to_vector<float>();
  manual_seed(8);
  auto first = Tensor::rand({4}).to_vector<float>();
  auto rest = Tensor::rand({6}).to_vector<float>();
  first.insert(first.end(), rest.begin(), rest.end());
  CHECK(whole == first);
  // rng_reserve hands out consecutive counter ranges.
  manual_seed(3);
  CHECK(rng_reserve(5).offset == 0);
  CHECK(rng_reserve(2).offset == 5);
  CHECK(rng_state().offset == 7);
}

TEST_CASE("uniform draws U[low, high) with the same counters as rand") {
  manual_seed(11);
  auto u = Tensor::rand({1000}, DType::f64).to_vector<double>();
  manual_seed(11);
  auto w = uniform({1000}, -2.0, 3.0, DType::f64, kCPU).to_vector<double>();
  for (size_t i = 0; i < u.size(); ++i) CHECK(w[i] == doctest::Approx(-2.0 + 5.0 * u[i]).epsilon(1e-12));
  auto p = uniform_philox({4}, 0.0, 1.0, DType::f32, kCPU, 11, 0).to_vector<float>();
  for (uint64_t i = 0; i < 4; ++i) CHECK(p[i] == philox_uniform(11, 0, i));
}
