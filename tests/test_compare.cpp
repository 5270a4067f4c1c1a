// The comparison helpers (tests/compare.h) catch what the checks built on
// them claim to: a planted NaN, an infinity, a shape that differs.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <volt/tensor/ops.h>

#include "tests/compare.h"

using namespace volt;
using volt::testing::max_abs_diff;
using volt::testing::max_rel_diff;

TEST_CASE("compare: a NaN where the reference has none is an infinite error") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> want{1.0, 2.0, 3.0};
  CHECK(max_abs_diff(std::vector<double>{1.0, 2.0, 3.0}, want) == 0.0);
  CHECK(max_abs_diff(std::vector<double>{1.0, 2.5, 3.0}, want) == 0.5);
  // Planted NaN anywhere, first or last (std::max's fold drops the first).
  CHECK(std::isinf(max_abs_diff(std::vector<double>{nan, 2.0, 3.0}, want)));
  CHECK(std::isinf(max_abs_diff(std::vector<double>{1.0, 2.0, nan}, want)));
  CHECK(std::isinf(max_rel_diff(std::vector<double>{1.0, nan, 3.0}, want, 1e-6)));
  // A NaN the reference has too, and the same infinity, are no error.
  CHECK(max_abs_diff(std::vector<double>{nan, inf, -inf}, std::vector<double>{nan, inf, -inf}) == 0.0);
  CHECK(std::isinf(max_abs_diff(std::vector<double>{inf}, std::vector<double>{-inf})));
  CHECK(std::isinf(max_abs_diff(std::vector<double>{1.0}, std::vector<double>{nan})));
  // Different lengths.
  CHECK(std::isinf(max_abs_diff(std::vector<double>{1.0, 2.0}, want)));
}

TEST_CASE("compare: tensors of different shapes are not close, even with the same values") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}).reshape({2, 3});
  CHECK(max_abs_diff(a, a.clone()) == 0.0);
  CHECK(std::isinf(max_abs_diff(a, a.reshape({3, 2}))));
  CHECK(std::isinf(max_rel_diff(a, a.reshape({6}))));
  Tensor planted = a.clone();
  planted.data_ptr<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isinf(max_abs_diff(planted, a)));
  // A swapped pair of elements is seen.
  Tensor swapped = Tensor::from_vector<float>({1, 2, 3, 4, 6, 5}).reshape({2, 3});
  CHECK(max_abs_diff(swapped, a) == 1.0);
}
