// Factories and metadata: empty/zeros/ones/full/arange/from_vector/rand/randn/
// randint with each dtype; item, to_vector, numel, sizes, strides, is_contiguous.
#include <doctest/doctest.h>

#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("empty, zeros, ones and full in every dtype") {
  for (DType dt : all_dtypes()) {
    INFO(dtype_name(dt));
    Tensor e = Tensor::empty({2, 3}, dt);
    CHECK(e.dtype() == dt);
    CHECK(e.sizes() == Shape{2, 3});
    CHECK(e.strides() == Shape{3, 1});
    CHECK(e.numel() == 6);
    CHECK(e.dim() == 2);
    CHECK(e.is_contiguous());
    CHECK(e.device() == kCPU);
    CHECK(ref_of(Tensor::zeros({2, 3}, dt)).v == std::vector<double>(6, 0.0));
    CHECK(ref_of(Tensor::ones({4}, dt)).v == std::vector<double>(4, 1.0));
    double fv = dt == DType::b8 ? 1.0 : 7.0;
    CHECK(ref_of(Tensor::full({3, 1}, fv, dt)).v == std::vector<double>(3, fv));
    CHECK(Tensor::zeros({}, dt).dim() == 0);
    CHECK(Tensor::zeros({}, dt).numel() == 1);
    CHECK(Tensor::zeros({0, 5}, dt).numel() == 0);
  }
  CHECK(Tensor::zeros({2}).dtype() == DType::f32);
  CHECK(Tensor::full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(Tensor::full({2}, -3, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{-3, -3});
  CHECK(Tensor::full({1}, 0.1, DType::f64).item<double>() == 0.1);
  CHECK(Tensor::scalar_tensor(4, DType::i64).item<int64_t>() == 4);
  CHECK_THROWS_AS(Tensor::empty({2, -1}), volt::Error);
  CHECK_THROWS_AS(Tensor::zeros({-3}), volt::Error);
}

TEST_CASE("sizes, strides and size/stride with negative dims") {
  Tensor a = Tensor::zeros({2, 3, 4});
  CHECK(a.strides() == Shape{12, 4, 1});
  CHECK(a.size(-1) == 4);
  CHECK(a.size(0) == 2);
  CHECK(a.stride(-2) == 4);
  CHECK(a.meta_str() == "cpu f32[2, 3, 4]");
  CHECK_THROWS_AS(a.size(3), volt::Error);
  CHECK_THROWS_AS(a.stride(-4), volt::Error);
  // Size-1 dims do not affect contiguity; a narrowed row-range is still contiguous.
  Tensor b = Tensor::zeros({3, 1, 4});
  CHECK(b.permute({1, 0, 2}).is_contiguous());
  CHECK(!b.permute({2, 1, 0}).is_contiguous());
  CHECK(Tensor::zeros({}).is_contiguous());
}

TEST_CASE("arange, both overloads and every dtype") {
  CHECK(Tensor::arange(5).dtype() == DType::i64);
  CHECK(Tensor::arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(Tensor::arange(0).numel() == 0);
  CHECK(Tensor::arange(2, 7).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4, 5, 6});
  CHECK(Tensor::arange(1, 2, 0.25, DType::f32).to_vector<float>() == std::vector<float>{1, 1.25f, 1.5f, 1.75f});
  CHECK(Tensor::arange(0, 1, 0.3, DType::f64).numel() == 4);  // 0, .3, .6, .9 as torch.arange
  CHECK(Tensor::arange(5, 0, -2, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{5, 3, 1});
  CHECK(Tensor::arange(3, 3).numel() == 0);
  CHECK(Tensor::arange(3, 1).numel() == 0);
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    Tensor t = Tensor::arange(4, dt);
    CHECK(t.dtype() == dt);
    CHECK(ref_of(t).v == std::vector<double>{0, 1, 2, 3});
    Tensor t2 = Tensor::arange(1, 9, 3, dt);
    CHECK(ref_of(t2).v == std::vector<double>{1, 4, 7});
  }
  CHECK_THROWS_AS(Tensor::arange(0, 5, 0), volt::Error);
}

TEST_CASE("from_vector, to_vector and item") {
  Tensor a = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.dtype() == DType::i32);
  CHECK(a.sizes() == Shape{2, 3});
  CHECK(a.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(a.t().to_vector<int64_t>() == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(Tensor::from_vector<double>({0.5}).dtype() == DType::f64);
  CHECK(Tensor::from_vector<uint8_t>({255}).item<int>() == 255);
  CHECK(Tensor::from_vector<bool>({true, false}).dtype() == DType::b8);
  CHECK(Tensor::from_vector<int64_t>({1, 2}).sizes() == Shape{2});
  CHECK(Tensor::from_vector<float>({}, {0, 2}).numel() == 0);
  CHECK(Tensor::from_vector<float>({2.5f}, {}).item<float>() == 2.5f);
  CHECK(Tensor::from_vector<float>({2.5f}, {1, 1}).item<double>() == 2.5);
  CHECK(Tensor::from_vector<bool>({true}).item<bool>() == true);
  CHECK(a.select(1, 2).select(0, 1).item<int32_t>() == 6);
  // Integers beyond 2^53 survive item().
  int64_t big = (int64_t{1} << 62) + 1;
  CHECK(Tensor::from_vector<int64_t>({big}).item<int64_t>() == big);
  CHECK(static_cast<bool>(Tensor::from_vector<float>({0.5f})));
  CHECK(!static_cast<bool>(Tensor::from_vector<int32_t>({0})));
  CHECK_THROWS_AS(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), volt::Error);
  CHECK_THROWS_AS(static_cast<bool>(Tensor::ones({2})), volt::Error);
}

TEST_CASE("rand, randn and randint: dtype, shape, range and the generator's offset") {
  manual_seed(5);
  Tensor u = Tensor::rand({3, 4});
  CHECK(u.dtype() == DType::f32);
  CHECK(u.sizes() == Shape{3, 4});
  CHECK(rng_state().offset == 12);
  Tensor u64 = Tensor::rand({7}, DType::f64);
  CHECK(u64.dtype() == DType::f64);
  CHECK(rng_state().offset == 19);
  Tensor n = Tensor::randn({2, 2}, DType::f64);
  CHECK(n.dtype() == DType::f64);
  CHECK(rng_state().offset == 23);
  for (DType dt : {DType::i64, DType::i32, DType::u8, DType::f32}) {
    Tensor r = Tensor::randint(-3, 4, {1000}, dt == DType::u8 ? DType::u8 : dt);
    if (dt == DType::u8) r = Tensor::randint(2, 6, {1000}, dt);
    CHECK(r.dtype() == dt);
    auto v = ref_of(r).v;
    double lo = dt == DType::u8 ? 2 : -3, hi = dt == DType::u8 ? 5 : 3;
    CHECK(*std::min_element(v.begin(), v.end()) == lo);  // both ends are hit in 1000 draws
    CHECK(*std::max_element(v.begin(), v.end()) == hi);
    for (double x : v) CHECK(x == std::floor(x));
  }
  CHECK(Tensor::randint(0, 10, {4}).dtype() == DType::i64);
  CHECK_THROWS_AS(Tensor::randint(3, 3, {2}), volt::Error);
  CHECK_THROWS_AS(Tensor::rand({2}, DType::i32), volt::Error);
  CHECK_THROWS_AS(Tensor::randn({2}, DType::i64), volt::Error);
  CHECK(Tensor::rand({0}).numel() == 0);
}
