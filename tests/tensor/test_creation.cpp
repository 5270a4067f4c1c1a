// Nested initializer lists, from_blob over caller-owned memory, and randperm.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

TEST_CASE("tensor from nested lists: shape, values and the inferred dtype") {
  Tensor a = volt::tensor({{1, 2}, {3, 4}});
  CHECK(a.sizes() == Shape{2, 2});
  CHECK(a.dtype() == DType::i64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4});
  Tensor b = volt::tensor({{1.5, 2}, {3, 4}});
  CHECK(b.dtype() == DType::f32);
  CHECK(b.to_vector<float>() == std::vector<float>{1.5, 2, 3, 4});
  Tensor c = volt::tensor({{{1, 2, 3}, {4, 5, 6}}, {{7, 8, 9}, {10, 11, 12}}});
  CHECK(c.sizes() == Shape{2, 2, 3});
  CHECK(c.to_vector<int64_t>()[11] == 12);
  CHECK(volt::tensor({{1, 2}, {3, 4}}, kF64).dtype() == DType::f64);
  CHECK(volt::tensor({{1}, {2}}, kF32).sizes() == Shape{2, 1});
  CHECK(volt::tensor({1, 2, 3}, kF64).to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(volt::tensor({{2.5f}}).sizes() == Shape{1, 1});
  CHECK(volt::tensor({{1}, {2}}).sizes() == Shape{2, 1});  // a column, not a flat list
  CHECK(volt::tensor({1, 2.5}).dtype() == DType::f32);
  CHECK(volt::tensor({1.0, 2.0}).dtype() == DType::f64);   // a flat list keeps its C++ type
  CHECK(volt::tensor(NestedList{{}, {}}).sizes() == Shape{2, 0});
  CHECK_THROWS_WITH_AS(volt::tensor({{1, 2}, {3}}), doctest::Contains("tensor: ragged nested list"), Error);
  CHECK_THROWS_WITH_AS(volt::tensor({{1, 2}, 3}), doctest::Contains("tensor: ragged nested list"), Error);
  CHECK_THROWS_WITH_AS(volt::tensor({1, {2, 3}}), doctest::Contains("tensor: ragged nested list"), Error);
}

TEST_CASE("from_blob wraps memory without copying, with and without a deleter") {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  {
    Tensor t = from_blob(buf.data(), {2, 3});
    CHECK(t.data_ptr<float>() == buf.data());
    CHECK(t.to_vector<float>() == buf);
    buf[4] = 50;  // the tensor sees the caller's writes...
    CHECK(t[1][1].item<float>() == 50);
    t.select(0, 0).fill_(-1.0);  // ...and the caller sees the tensor's
    CHECK(buf[0] == -1);
    CHECK((t * 2.0).to_vector<float>()[5] == 12);
    Tensor col = from_blob(buf.data(), {3}, {2}, {}, DType::f32);  // a strided view: every other float
    CHECK(col.to_vector<float>() == std::vector<float>{-1, -1, 50});
  }
  int deleted = 0;
  double* heap = new double[4]{1, 2, 3, 4};
  {
    Tensor t = from_blob(heap, {4}, [&](void* p) { ++deleted; delete[] static_cast<double*>(p); }, DType::f64);
    Tensor view = t.narrow(0, 1, 2);
    t = Tensor();
    CHECK(deleted == 0);  // a view keeps the memory
    CHECK(view.to_vector<double>() == std::vector<double>{2, 3});
  }
  CHECK(deleted == 1);
  CHECK_THROWS_WITH_AS(from_blob(nullptr, {2}), doctest::Contains("from_blob: got a null data pointer"), Error);
}

TEST_CASE("randperm is a permutation, repeatable under manual_seed") {
  manual_seed(3);
  Tensor p = randperm(50);
  CHECK(p.dtype() == DType::i64);
  auto v = p.to_vector<int64_t>();
  auto sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) CHECK(sorted[i] == i);
  CHECK(v != sorted);  // shuffled (a sorted draw has probability 1/50!)
  Tensor q = randperm(50);
  CHECK(q.to_vector<int64_t>() != v);  // the generator moved on
  manual_seed(3);
  CHECK(randperm(50).to_vector<int64_t>() == v);
  CHECK(randperm(0).numel() == 0);
  CHECK(randperm(4, DType::f32).dtype() == DType::f32);
  CHECK_THROWS_WITH_AS(randperm(-1), doctest::Contains("randperm: n must be non-negative"), Error);
}
