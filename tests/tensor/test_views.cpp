// Views share storage with their base and write through; reshape copies only
// when it has to; view() of an incompatible layout errors.
#include <doctest/doctest.h>

#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

Tensor iota(const Shape& s, DType dt = DType::f32) {
  return Tensor::arange(static_cast<double>(shape_numel(s)), dt).reshape(s);
}

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage == b.impl()->storage;
}

// Writing 100 through `v` at its element `idx` changes `base` at `base_idx`.
void check_writes_through(const std::string& label, const Tensor& base, Tensor v,
                          const std::vector<int64_t>& idx, const std::vector<int64_t>& base_idx) {
  INFO(label);
  CHECK(shares_storage(base, v));
  Tensor e = v;
  for (int64_t i : idx) e = e.select(0, i);
  e.fill_(100);
  Ref r = ref_of(base);
  CHECK(r.v[ravel(base_idx, base.sizes())] == 100);
  int64_t hundreds = 0;
  for (double x : r.v) hundreds += x == 100;
  CHECK(hundreds == 1);
}

}  // namespace

TEST_CASE("select, narrow, slice") {
  Tensor a = iota({3, 4});
  CHECK(a.select(0, 1).to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(a.select(1, -1).to_vector<float>() == std::vector<float>{3, 7, 11});
  CHECK(a[2].sizes() == Shape{4});
  CHECK(a.narrow(1, 1, 2).sizes() == Shape{3, 2});
  CHECK(a.narrow(1, 1, 2).to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(a.narrow(0, -2, 2).to_vector<float>() == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(a.narrow(1, 1, 2).strides() == Shape{4, 1});
  CHECK(a.narrow(1, 1, 2).storage_offset() == 1);
  CHECK(!a.narrow(1, 1, 2).is_contiguous());
  CHECK(a.narrow(0, 1, 2).is_contiguous());
  CHECK(a.slice(1, 1, -1).to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(a.slice(0, 2, 100).sizes() == Shape{1, 4});
  CHECK(a.narrow(0, 1, 0).numel() == 0);
  check_writes_through("select", a, a.select(1, 2), {1}, {1, 2});
  Tensor b = iota({3, 4});
  check_writes_through("narrow view", b, b.narrow(1, 1, 2), {2, 1}, {2, 2});
}

TEST_CASE("transpose, permute, t") {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(!p.is_contiguous());
  // p[i, j, k] == a[j, k, i]
  Ref rp = ref_of(p), ra = ref_of(a);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(rp.v[(i * 2 + j) * 3 + k] == ra.v[(j * 3 + k) * 4 + i]);
  CHECK(a.permute({-1, 0, 1}).sizes() == Shape{4, 2, 3});
  CHECK(a.transpose(0, 2).sizes() == Shape{4, 3, 2});
  CHECK(a.transpose(-1, -3).strides() == Shape{1, 4, 12});
  Tensor m = iota({2, 3});
  CHECK(m.t().sizes() == Shape{3, 2});
  CHECK(m.t().to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(iota({5}).t().sizes() == Shape{5});
  check_writes_through("permute", a, p, {3, 1, 2}, {1, 2, 3});
  Tensor b = iota({2, 3});
  check_writes_through("t", b, b.t(), {2, 0}, {0, 2});
  CHECK_THROWS_AS(a.permute({0, 1}), volt::Error);
  CHECK_THROWS_AS(a.permute({0, 1, 1}), volt::Error);
  CHECK_THROWS_AS(a.t(), volt::Error);
}

TEST_CASE("expand broadcasts with stride 0 and shares storage") {
  Tensor a = iota({3, 1});
  Tensor e = a.expand({2, 3, 4});
  CHECK(e.sizes() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(shares_storage(a, e));
  Ref r = ref_of(e);
  for (int64_t i = 0; i < 24; ++i) CHECK(r.v[i] == (i / 4) % 3);
  CHECK(a.expand({-1, 5}).sizes() == Shape{3, 5});
  CHECK(a.expand_as(Tensor::zeros({3, 2})).sizes() == Shape{3, 2});
  // Writing into the base shows in every broadcast copy.
  a.select(0, 1).fill_(9);
  CHECK(e.select(1, 1).to_vector<float>() == std::vector<float>(8, 9.0f));
  CHECK_THROWS_AS(a.expand({3, 4, 2}), volt::Error);
  CHECK_THROWS_AS(a.expand({4}), volt::Error);
  CHECK_THROWS_WITH_AS(a.expand({-1, 3, 2}), doctest::Contains("expand: invalid size [-1, 3, 2]"), volt::Error);
  // Views of an expanded tensor keep its zero strides instead of copying.
  Tensor u = e.unsqueeze(0);
  CHECK(u.strides() == Shape{0, 0, 1, 0});
  CHECK(shares_storage(u, a));
  CHECK(e.select(2, 1).strides() == Shape{0, 1});
}

TEST_CASE("unsqueeze, squeeze and flatten are views") {
  Tensor a = iota({2, 1, 3});
  CHECK(a.unsqueeze(0).sizes() == Shape{1, 2, 1, 3});
  CHECK(a.unsqueeze(-1).sizes() == Shape{2, 1, 3, 1});
  CHECK(a.unsqueeze(3).sizes() == Shape{2, 1, 3, 1});
  CHECK(a.squeeze().sizes() == Shape{2, 3});
  CHECK(a.squeeze(1).sizes() == Shape{2, 3});
  CHECK(a.squeeze(0).sizes() == Shape{2, 1, 3});  // not size 1: unchanged
  CHECK(a.flatten().sizes() == Shape{6});
  CHECK(iota({2, 3, 4}).flatten(1).sizes() == Shape{2, 12});
  CHECK(iota({2, 3, 4, 5}).flatten(1, 2).sizes() == Shape{2, 12, 5});
  CHECK(Tensor::scalar_tensor(1.0, DType::f32).flatten().sizes() == Shape{1});
  check_writes_through("unsqueeze", a, a.unsqueeze(1), {1, 0, 0, 2}, {1, 0, 2});
  Tensor b = iota({2, 1, 3});
  check_writes_through("squeeze", b, b.squeeze(), {0, 1}, {0, 0, 1});
  Tensor c = iota({2, 3, 4});
  check_writes_through("flatten", c, c.flatten(), {13}, {1, 0, 1});
}

TEST_CASE("views of non-contiguous tensors still write through") {
  // Each of these is expressible as strides, so PyTorch returns a view.
  Tensor a = iota({3, 4});
  check_writes_through("select of transpose", a, a.t().select(0, 1), {2}, {2, 1});
  Tensor b = iota({3, 4});
  check_writes_through("unsqueeze of transpose", b, b.t().unsqueeze(1), {3, 0, 1}, {1, 3});
  Tensor c = iota({3, 1, 4});
  check_writes_through("squeeze of permute", c, c.permute({2, 1, 0}).squeeze(), {3, 2}, {2, 0, 3});
  Tensor d = iota({4, 6});
  check_writes_through("narrow of select of transpose", d, d.t().select(0, 5).narrow(0, 1, 2), {1}, {2, 5});
  Tensor e = iota({2, 3, 4});
  // Merging dims that are contiguous with each other inside a permuted tensor.
  check_writes_through("reshape merging compatible dims", e, e.permute({1, 2, 0}).reshape({12, 2}), {5, 1},
                       {1, 1, 1});
}

TEST_CASE("view and reshape") {
  Tensor a = iota({2, 6});
  Tensor v = a.view({3, 4});
  CHECK(v.sizes() == Shape{3, 4});
  CHECK(v.is_contiguous());
  CHECK(a.view({-1}).sizes() == Shape{12});
  CHECK(a.view({2, -1, 3}).sizes() == Shape{2, 2, 3});
  check_writes_through("view", a, v, {2, 3}, {1, 5});
  Tensor b = iota({2, 6});
  check_writes_through("reshape of contiguous", b, b.reshape({4, 3}), {1, 2}, {0, 5});

  // reshape of a non-contiguous tensor copies: the values are right, the base is untouched.
  Tensor c = iota({3, 4});
  Tensor r = c.t().reshape({12});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(r.is_contiguous());
  r.fill_(-1);
  CHECK(c.to_vector<float>() == iota({3, 4}).to_vector<float>());
  // view of the same errors.
  CHECK_THROWS_WITH_AS(c.t().view({12}), doctest::Contains("view"), volt::Error);
  CHECK_THROWS_AS(a.view({5, 2}), volt::Error);
  CHECK_THROWS_AS(a.reshape({-1, -1}), volt::Error);
  // Empty tensors reshape too.
  CHECK(Tensor::zeros({0, 4}).reshape({2, 0, 3}).sizes() == Shape{2, 0, 3});
  CHECK(Tensor::zeros({0, 4}).reshape({-1, 2}).sizes() == Shape{0, 2});
}

TEST_CASE("view of a non-contiguous tensor follows PyTorch's stride rule") {
  // A column slice (a split of a wider last dim, as attention's q, k, v):
  // strides (12, 1); its last dim splits into (2, 2) without a copy.
  Tensor a = iota({3, 12});
  Tensor q = a.narrow(1, 4, 4);
  REQUIRE_FALSE(q.is_contiguous());
  Tensor heads = q.view({3, 2, 2});
  CHECK(heads.strides() == Shape{12, 2, 1});
  CHECK(heads.to_vector<float>() == q.contiguous().view({3, 2, 2}).to_vector<float>());
  check_writes_through("view of a column slice", a, heads, {2, 1, 0}, {2, 6});
  // Rows of the slice may merge with a leading unit dim, and a transpose's
  // dims may be split or unsqueezed, since each stays a strided run.
  CHECK(q.view({1, 3, 4}).strides() == Shape{36, 12, 1});
  Tensor t = iota({4, 6}).t();  // (6, 4), strides (1, 6)
  CHECK(t.view({2, 3, 4}).strides() == Shape{3, 1, 6});
  CHECK(t.view({2, 3, 4}).to_vector<float>() == t.contiguous().view({2, 3, 4}).to_vector<float>());
  // Merging dims that are not one strided run needs a copy: an error, as in PyTorch.
  CHECK_THROWS_WITH_AS(q.view({12}), doctest::Contains("without a copy"), volt::Error);
  CHECK_THROWS_WITH_AS(t.view({24}), doctest::Contains("strides [1, 6]"), volt::Error);
}

TEST_CASE("contiguous, clone and to(dtype)") {
  Tensor a = iota({2, 3});
  CHECK(a.contiguous().is_same(a));
  Tensor t = a.t();
  Tensor tc = t.contiguous();
  CHECK(tc.is_contiguous());
  CHECK(!shares_storage(tc, a));
  CHECK(tc.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor cl = a.clone();
  CHECK(!shares_storage(cl, a));
  cl.fill_(0);
  CHECK(a.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(a.to(DType::f32).is_same(a));
  Tensor d = a.to(DType::i32);
  CHECK(d.dtype() == DType::i32);
  CHECK(d.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(Tensor::from_vector<float>({-1.5f, 0.0f, 2.0f}).to(DType::b8).to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  CHECK(Tensor::from_vector<double>({2.7, -2.7}).to(DType::i64).to_vector<int64_t>() ==
        std::vector<int64_t>{2, -2});
  CHECK(Tensor::from_vector<uint8_t>({200, 3}).to(DType::f32).to_vector<float>() == std::vector<float>{200, 3});
  // Converting a transposed tensor keeps the logical order.
  CHECK(a.t().to(DType::f64).to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("a view with no element is contiguous whatever its strides, as in PyTorch") {
  Tensor b = Tensor::zeros({4, 5});
  // Each keeps strides of its base that are not the contiguous ones of its shape.
  Tensor t0 = Tensor::zeros({0, 3}).t();  // [3, 0], strides [1, 3]
  REQUIRE(t0.strides() == Shape{1, 3});
  CHECK(t0.is_contiguous());
  Tensor n0 = b.t().narrow(1, 1, 0);  // [5, 0], strides [1, 5]
  REQUIRE(n0.strides() == Shape{1, 5});
  CHECK(n0.is_contiguous());
  CHECK(b.narrow(1, 2, 0).is_contiguous());
  CHECK(Tensor::zeros({2, 0, 3}).permute({2, 0, 1}).is_contiguous());
  CHECK(Tensor::zeros({1, 3}).expand({0, 3}).is_contiguous());
  CHECK(b.t().narrow(0, 4, 0).is_contiguous());
  // So view() takes any shape of no element, and contiguous() keeps the tensor.
  CHECK(n0.view({0, 7}).sizes() == Shape{0, 7});
  CHECK(n0.contiguous().sizes() == Shape{5, 0});
  // A view with elements keeps the stride rule.
  CHECK_FALSE(b.t().narrow(1, 1, 2).is_contiguous());
}
