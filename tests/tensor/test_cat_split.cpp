// cat, stack, split and chunk: values against index arithmetic on plain
// vectors, f64 gradients by finite differences, every mode against eager,
// and the errors that name the op.
#include <doctest/doctest.h>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/modes.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::unravel;

namespace {

// The naive join: out[.., i, ..] from the piece whose range along dim holds i.
std::vector<double> ref_cat(const std::vector<Tensor>& ts, int64_t dim, Shape& out) {
  out = ts[0].sizes();
  out[dim] = 0;
  for (const Tensor& t : ts) out[dim] += t.sizes()[dim];
  std::vector<double> r;
  for (int64_t i = 0; i < shape_numel(out); ++i) {
    auto idx = unravel(i, out);
    for (const Tensor& t : ts) {
      if (idx[dim] < t.sizes()[dim]) {
        auto v = t.to_vector<double>();
        r.push_back(v[volt::testing::ravel(idx, t.sizes())]);
        break;
      }
      idx[dim] -= t.sizes()[dim];
    }
  }
  return r;
}

}  // namespace

TEST_CASE("cat joins along any dim, as index arithmetic says") {
  manual_seed(1);
  for (int64_t dim : {0, 1, 2, -1}) {
    Shape a{2, 3, 4}, b{2, 3, 4}, c{2, 3, 4};
    const int64_t d = dim < 0 ? dim + 3 : dim;
    b[d] = 1;
    c[d] = 5;
    std::vector<Tensor> ts{Tensor::randn(a), Tensor::randn(b), Tensor::randn(c)};
    Shape want_shape;
    auto want = ref_cat(ts, d, want_shape);
    Tensor got = cat(ts, dim);
    CHECK(got.sizes() == want_shape);
    CHECK(got.to_vector<double>() == want);
  }
  // Integers and non-contiguous pieces.
  Tensor i = Tensor::arange(6).reshape({2, 3});
  CHECK(cat({i, i.t().contiguous().t()}, 0).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  CHECK(cat({i.t(), i.t()}, 1).dtype() == DType::i64);
  CHECK(cat({i.t(), i.t()}, 1).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
  CHECK(cat({i}, 1).to_vector<int64_t>() == i.to_vector<int64_t>());
}

TEST_CASE("stack puts a new dim at any place") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = a * 10.0;
  CHECK(stack({a, b}).sizes() == Shape{2, 2, 3});
  CHECK(stack({a, b}, 1).sizes() == Shape{2, 2, 3});
  CHECK(stack({a, b}, 2).sizes() == Shape{2, 3, 2});
  CHECK(stack({a, b}, -1).to_vector<float>() ==
        std::vector<float>{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60});
  CHECK(stack({a, b}, 1).to_vector<float>() ==
        std::vector<float>{1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60});
}

TEST_CASE("split and chunk are views of the right ranges") {
  Tensor x = Tensor::arange(20, DType::f32).reshape({4, 5});
  auto parts = split(x, 2, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].sizes() == Shape{4, 2});
  CHECK(parts[2].sizes() == Shape{4, 1});
  CHECK(parts[2].to_vector<float>() == std::vector<float>{4, 9, 14, 19});
  CHECK(parts[1].storage_offset() == 2);  // a view, no copy
  auto sized = x.split({1, 3}, 0);
  REQUIRE(sized.size() == 2);
  CHECK(sized[1].to_vector<float>() == x.narrow(0, 1, 3).to_vector<float>());
  auto ch = x.chunk(3, 1);  // ceil(5/3) = 2: 2, 2, 1
  REQUIRE(ch.size() == 3);
  CHECK(ch[0].sizes() == Shape{4, 2});
  CHECK(ch[2].sizes() == Shape{4, 1});
  CHECK(chunk(x, 2, 0)[1].to_vector<float>() == std::vector<float>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  CHECK(chunk(x, 6, 0).size() == 4);  // no empty chunks, as PyTorch
  // q, k, v from one projection, as attention splits it.
  Tensor qkv = Tensor::randn({2, 3, 12});
  auto qs = qkv.split(4, 2);
  REQUIRE(qs.size() == 3);
  CHECK(cat(qs, 2).to_vector<float>() == qkv.to_vector<float>());
}

TEST_CASE("cat, stack, split and chunk: f64 gradients by finite differences") {
  manual_seed(2);
  Tensor a = Tensor::randn({2, 3}, DType::f64), b = Tensor::randn({2, 2}, DType::f64);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return cat({x[0], x[1], x[0]}, 1); }, {a, b}).ok);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return stack({x[0], x[0] * 2.0}, 1); }, {a}).ok);
  CHECK(autograd::gradcheck(
            [](const std::vector<Tensor>& x) {
              auto p = split(x[0], {1, 2}, 1);
              return p[1] * p[0];
            },
            {a})
            .ok);
  CHECK(autograd::gradcheck(
            [](const std::vector<Tensor>& x) {
              auto p = x[0].chunk(2, 0);
              return p[0] - p[1] * 3.0;
            },
            {a})
            .ok);
}

TEST_CASE("cat, stack, split: the jit, compile_step and the lazy device equal eager") {
  manual_seed(3);
  Tensor a = Tensor::randn({2, 3}), b = Tensor::randn({2, 4});
  check_modes([](const std::vector<Tensor>& x) { return cat({x[0], x[1]}, 1); }, {a, b});
  check_modes([](const std::vector<Tensor>& x) { return stack({x[0], x[0] * 2.0}, 0); }, {a});
  check_modes(
      [](const std::vector<Tensor>& x) {
        auto p = x[0].split({1, 3}, 1);
        return p[0] * p[1];
      },
      {b});
}

TEST_CASE("cat, stack and split: bad input names the op") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 3}), c = Tensor::zeros({2, 3}, DType::f64);
  CHECK_THROWS_WITH_AS(cat({a, b}, 1), doctest::Contains("cat: sizes must match except in dim 1"), Error);
  CHECK_THROWS_WITH_AS(cat({a, c}, 0), doctest::Contains("cat: expected tensors of one dtype"), Error);
  CHECK_THROWS_WITH_AS(cat({a, Tensor::zeros({6})}, 0), doctest::Contains("cat: sizes must match"), Error);
  CHECK_THROWS_WITH_AS(cat({}, 0), doctest::Contains("cat: expected a non-empty list"), Error);
  CHECK_THROWS_WITH_AS(cat({a, a}, 2), doctest::Contains("cat"), Error);
  CHECK_THROWS_WITH_AS(stack({a, b}), doctest::Contains("stack: expected tensors of one shape"), Error);
  CHECK_THROWS_WITH_AS(split(a, {1, 1}, 1), doctest::Contains("split: split sizes add up to 2 but dim 1 has size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(split(a, 0, 1), doctest::Contains("split: split_size must be positive"), Error);
  CHECK_THROWS_WITH_AS(chunk(a, 0, 1), doctest::Contains("chunk"), Error);
}

TEST_CASE("pad: zeros before and after along each dim, exact in f32, bf16 and i64, from contiguous and permuted inputs") {
  // The naive rule: out[idx] = a[idx with idx[dim] - before] inside a's range along dim, else 0.
  for (DType dt : {DType::f32, DType::bf16, DType::i64})
    for (bool permuted : {false, true})
      for (int64_t dim = 0; dim < 3; ++dim) {
        CAPTURE(dtype_name(dt));
        CAPTURE(permuted);
        CAPTURE(dim);
        Tensor base = (Tensor::randn({4, 3, 5}) * 8.0).to(dt);
        Tensor a = permuted ? base.permute({2, 0, 1}) : base;  // (5, 4, 3) view, or (4, 3, 5)
        const int64_t before = 2, after = dim == 1 ? 0 : 3;
        Tensor got = pad(a, dim, before, after);
        Shape want_shape = a.sizes();
        want_shape[static_cast<size_t>(dim)] += before + after;
        REQUIRE(got.sizes() == want_shape);
        CHECK(got.dtype() == dt);
        const std::vector<double> av = a.contiguous().to_vector<double>(), gv = got.to_vector<double>();
        const Shape as = a.sizes();
        std::vector<double> want(gv.size());
        for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i) {
          auto idx = unravel(i, want_shape);
          const int64_t j = idx[static_cast<size_t>(dim)] - before;
          if (j < 0 || j >= as[static_cast<size_t>(dim)]) continue;
          idx[static_cast<size_t>(dim)] = j;
          want[static_cast<size_t>(i)] = av[static_cast<size_t>((idx[0] * as[1] + idx[1]) * as[2] + idx[2])];
        }
        CHECK(gv == want);
      }
}
