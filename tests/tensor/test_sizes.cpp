// Sizes that do not fit: every product of a shape is checked, so a huge shape is
// an error naming the op rather than a tensor backed by a few wrapped bytes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <volt/tensor/ops.h>
#include <volt/tensor/tensor.h>

using namespace volt;

TEST_CASE("sizes: shape_numel and contiguous_strides refuse a count past int64") {
  CHECK(shape_numel({3, 0, 5}) == 0);
  CHECK(shape_numel({int64_t(1) << 31, int64_t(1) << 31}) == int64_t(1) << 62);
  CHECK_THROWS_WITH_AS(shape_numel({int64_t(1) << 32, int64_t(1) << 32}, "myop"),
                       doctest::Contains("myop: shape [4294967296, 4294967296] has more elements"), Error);
  CHECK_THROWS_AS(contiguous_strides({int64_t(1) << 40, int64_t(1) << 40, 2}), Error);
  // A zero dim makes the count 0 but the strides still multiply the others.
  CHECK_THROWS_AS(contiguous_strides({0, int64_t(1) << 40, int64_t(1) << 40}), Error);
  CHECK(contiguous_strides({2, 0, 3}) == Shape{3, 3, 1});
}

TEST_CASE("sizes: Tensor::empty of 2^62 elements is an error, not 64 bytes") {
  // 2^62 f32 elements are 2^64 bytes: the byte count used to wrap to 0.
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 62}), doctest::Contains("empty: shape [4611686018427387904]"),
                       Error);
  CHECK_THROWS_AS(Tensor::empty({int64_t(1) << 61}, DType::f64), Error);
  CHECK_THROWS_AS(Tensor::empty({int64_t(1) << 32, int64_t(1) << 32}, DType::u8), Error);
  // Fits in the count, not in memory: a clean allocation error.
  CHECK_THROWS_AS(Tensor::empty({int64_t(1) << 60}, DType::u8), Error);
  CHECK_THROWS_AS(Tensor::zeros({int64_t(1) << 62}), Error);
  CHECK_THROWS_AS(Tensor::ones({int64_t(1) << 62, 4}), Error);
  CHECK(Tensor::empty({0, int64_t(1) << 20}).numel() == 0);
}

TEST_CASE("sizes: views and factories with overflowing shapes") {
  Tensor a = Tensor::ones({2});
  CHECK_THROWS_WITH_AS(a.expand({int64_t(1) << 62, int64_t(1) << 62, 2}), doctest::Contains("expand"), Error);
  CHECK_THROWS_WITH_AS(a.reshape({int64_t(1) << 62, int64_t(1) << 62, -1}), doctest::Contains("reshape"), Error);
  CHECK_THROWS_WITH_AS(a.narrow(0, 1, std::numeric_limits<int64_t>::max()), doctest::Contains("out of bounds"),
                       Error);
  CHECK_THROWS_WITH_AS(Tensor::arange(0, INFINITY), doctest::Contains("arange: expected finite"), Error);
  CHECK_THROWS_WITH_AS(Tensor::arange(0, NAN), doctest::Contains("arange"), Error);
  CHECK_THROWS_WITH_AS(Tensor::arange(0, 1e300, 1), doctest::Contains("too many elements"), Error);
  CHECK(Tensor::arange(5, 2).numel() == 0);
}
