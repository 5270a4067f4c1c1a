// Reductions over any set of dims, with and without keepdim, against plain loops.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

const std::vector<std::vector<int64_t>>& dim_sets() {
  static const std::vector<std::vector<int64_t>> s{{}, {0}, {1}, {2}, {-1}, {0, 2}, {2, 0}, {1, 2}, {0, 1, 2}};
  return s;
}

std::string dims_str(const std::vector<int64_t>& d) { return shape_str(d); }

// A (2, 3, 4) tensor in three layouts: contiguous, permuted storage, strided.
std::vector<std::pair<std::string, Tensor>> inputs(DType dt, uint32_t seed) {
  Tensor c = sample({2, 3, 4}, dt, seed);
  Tensor p = c.permute({2, 0, 1}).contiguous().permute({1, 2, 0});  // same values, odd strides
  return {{"contiguous", c}, {"permuted", p}, {"strided", strided(c)}};
}

}  // namespace

TEST_CASE("sum, amax and amin over every dim set on every dtype") {
  for (DType dt : all_dtypes())
    for (auto& [layout, x] : inputs(dt, 7))
      for (const auto& dims : dim_sets())
        for (bool keep : {false, true}) {
          std::string label = std::string(dtype_name(dt)) + " " + layout + " dims " + dims_str(dims) +
                              (keep ? " keepdim" : "");
          Ref rx = ref_of(x);
          Tensor s = sum(x, dims, keep);
          // Integer and bool sums accumulate in i64, as in PyTorch.
          DType sum_dt = is_floating(dt) ? dt : DType::i64;
          CHECK(s.dtype() == sum_dt);
          check_close("sum " + label, s, ref_cast(ref_reduce(rx, dims, keep, ref_sum), sum_dt), 1e-5, 1e-5);
          Tensor mx = amax(x, dims, keep), mn = amin(x, dims, keep);
          CHECK(mx.dtype() == dt);
          CHECK(mn.dtype() == dt);
          check_close("amax " + label, mx, ref_reduce(rx, dims, keep, ref_max));
          check_close("amin " + label, mn, ref_reduce(rx, dims, keep, ref_min));
        }
}

TEST_CASE("mean and var (correction 1) over every dim set") {
  for (DType dt : {DType::f32, DType::f64})
    for (auto& [layout, x] : inputs(dt, 9))
      for (const auto& dims : dim_sets())
        for (bool keep : {false, true}) {
          std::string label = std::string(dtype_name(dt)) + " " + layout + " dims " + dims_str(dims) +
                              (keep ? " keepdim" : "");
          Ref rx = ref_of(x);
          Tensor m = mean(x, dims, keep), v = var(x, dims, keep);
          CHECK(m.dtype() == dt);
          CHECK(v.dtype() == dt);
          check_close("mean " + label, m, ref_reduce(rx, dims, keep, ref_mean), 1e-6, 1e-5);
          check_close("var " + label, v, ref_reduce(rx, dims, keep, ref_var), 1e-6, 1e-5);
        }
  // correction 0 is the population variance; one element with correction 1 is NaN.
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4});
  CHECK(var(x, {}, false, 0).item<double>() == doctest::Approx(1.25));
  CHECK(var(x).item<double>() == doctest::Approx(5.0 / 3.0));
  CHECK(std::isnan(var(Tensor::from_vector<double>({3.0})).item<double>()));
  // Method forms.
  CHECK(x.mean().item<double>() == 2.5);
  CHECK(x.sum().item<double>() == 10);
  CHECK(x.amax().item<double>() == 4);
}

TEST_CASE("argmax and argmin return the first extremal index along a dim") {
  for (DType dt : all_dtypes()) {
    // Integer-valued samples so that ties occur.
    DType src = dt == DType::u8 || dt == DType::b8 ? dt : DType::i32;
    Tensor c = make(sample_values(24, src, 13), {2, 3, 4}, dt);
    for (const Tensor& x : {c, c.permute({2, 0, 1}).contiguous().permute({1, 2, 0}), strided(c)})
      for (int64_t d = -3; d < 3; ++d)
        for (bool keep : {false, true}) {
          std::string label = std::string(dtype_name(dt)) + " dim " + std::to_string(d) + (keep ? " keepdim" : "");
          Tensor am = argmax(x, d, keep), an = argmin(x, d, keep);
          CHECK(am.dtype() == DType::i64);
          check_close("argmax " + label, am, ref_reduce(ref_of(x), {d}, keep, ref_argmax));
          check_close("argmin " + label, an, ref_reduce(ref_of(x), {d}, keep, ref_argmin));
        }
  }
  Tensor t = Tensor::from_vector<float>({1, 5, 5, 2, NAN, 3}, {2, 3});
  CHECK(t.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});  // NaN counts as the max
  CHECK(argmin(t, 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(t.argmax(0, true).sizes() == Shape{1, 3});
}

TEST_CASE("reductions of empty and zero-dim tensors") {
  Tensor e = Tensor::zeros({0, 3});
  CHECK(sum(e).item<float>() == 0.0f);
  CHECK(sum(e, {0}).sizes() == Shape{3});
  CHECK(sum(e, {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(sum(e, {1}).sizes() == Shape{0});
  CHECK(sum(e, {1}, true).sizes() == Shape{0, 1});
  CHECK(amax(e, {1}).sizes() == Shape{0});  // reduces a non-empty dim of an empty tensor
  CHECK_THROWS_AS(amax(e, {0}), volt::Error);
  CHECK_THROWS_AS(argmax(e, 0), volt::Error);
  CHECK(std::isnan(mean(e).item<float>()));

  Tensor z = Tensor::scalar_tensor(2.5, DType::f64);
  CHECK(sum(z).item<double>() == 2.5);
  CHECK(sum(z, {0}).item<double>() == 2.5);
  CHECK(sum(z, {-1}, true).dim() == 0);
  CHECK(amax(z).item<double>() == 2.5);
  CHECK(mean(z, {0}).item<double>() == 2.5);
  CHECK(argmax(z, 0).item<int64_t>() == 0);
  CHECK(argmin(z, -1).item<int64_t>() == 0);
}

TEST_CASE("reductions reject bad dims and non-floating mean") {
  Tensor x = Tensor::ones({2, 3});
  CHECK_THROWS_AS(sum(x, {2}), volt::Error);
  CHECK_THROWS_AS(sum(x, {0, 0}), volt::Error);
  CHECK_THROWS_AS(sum(x, {1, -1}), volt::Error);
  CHECK_THROWS_AS(mean(Tensor::ones({2}, DType::i32)), volt::Error);
  CHECK_THROWS_AS(var(Tensor::ones({2}, DType::i64)), volt::Error);
  CHECK_THROWS_AS(mean(x, {0, -2}), volt::Error);
}

TEST_CASE("large sums accumulate in double for f32") {
  // 2^24 + 1 ones: a naive f32 accumulator would stop at 2^24.
  Tensor x = Tensor::ones({(1 << 24) + 8});
  CHECK(sum(x).item<double>() == double((1 << 24) + 8));
}
