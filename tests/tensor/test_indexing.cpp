// t.index({...}) / t.index_put_({...}, v) against element-by-element references.
#include <doctest/doctest.h>

#include <volt/tensor/indexing.h>
#include <volt/tensor/ops.h>

using namespace volt;
using namespace volt::indexing;

namespace {
// a[i][j] = 4 * i + j, shape [3, 4]
Tensor grid() { return Tensor::arange(12, DType::f32).reshape({3, 4}); }
std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("index: integers, slices, None and Ellipsis give views with Python's rules") {
  Tensor a = grid();
  CHECK(values(a.index({1})) == std::vector<float>{4, 5, 6, 7});
  CHECK(values(a.index({-1, -2})) == std::vector<float>{10});
  Tensor cols = a.index({Slice(), Slice(1, 3)});
  CHECK(cols.sizes() == Shape{3, 2});
  CHECK(values(cols) == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(values(a.index({Slice(-2)})) == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(a.index({Slice(5, 100)}).sizes() == Shape{0, 4});   // clamped, as Python
  CHECK(a.index({Slice(2, 1)}).sizes() == Shape{0, 4});     // stop before start: empty
  CHECK(values(a.index({Ellipsis, -1})) == std::vector<float>{3, 7, 11});
  CHECK(a.index({None, 0}).sizes() == Shape{1, 4});
  CHECK(a.index({Slice(), None}).sizes() == Shape{3, 1, 4});
  // Views write through to the tensor they came from.
  a.index({0, Slice(0, 2)}).fill_(-1.0);
  CHECK(values(a.index({0})) == std::vector<float>{-1, -1, 2, 3});
}

TEST_CASE("index: a boolean mask reads the selected elements or rows, in order") {
  Tensor a = grid();
  Tensor odd_above_4 = a.index({a > 4.0});
  CHECK(values(odd_above_4) == std::vector<float>{5, 6, 7, 8, 9, 10, 11});
  Tensor rows = a.index({Tensor::from_vector<float>({1, 0, 1}) > 0.5});
  CHECK(rows.sizes() == Shape{2, 4});
  CHECK(values(rows) == std::vector<float>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(a.index({a > 100.0}).sizes() == Shape{0});
}

TEST_CASE("index_put_: through views and through masks") {
  Tensor a = grid();
  a.index_put_({Slice(0, 2), 0}, 9.0);
  CHECK(values(a.index({Slice(), 0})) == std::vector<float>{9, 9, 8});
  a.index_put_({2}, Tensor::from_vector<float>({1, 2, 3, 4}));
  CHECK(values(a.index({2})) == std::vector<float>{1, 2, 3, 4});
  Tensor b = grid();
  b.index_put_({b > 6.0}, 0.0);
  CHECK(values(b) == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0});
  Tensor c = grid();
  c.index_put_({Tensor::from_vector<float>({0, 1, 0}) > 0.5}, Tensor::from_vector<float>({-1, -2, -3, -4}));
  CHECK(values(c) == std::vector<float>{0, 1, 2, 3, -1, -2, -3, -4, 8, 9, 10, 11});
}

TEST_CASE("index: misuse names the op and what was expected") {
  Tensor a = grid();
  CHECK_THROWS_WITH_AS(a.index({0, 0, 0}), doctest::Contains("too many indices"), volt::Error);
  CHECK_THROWS_WITH_AS(a.index({Ellipsis, Ellipsis}), doctest::Contains("at most one Ellipsis"), volt::Error);
  CHECK_THROWS_WITH_AS(a.index({Slice(0, 3, 2)}), doctest::Contains("step must be 1"), volt::Error);
  CHECK_THROWS_WITH_AS(a.index({5}), doctest::Contains("select"), volt::Error);
  // A 1-D integer tensor picks rows (index_select); any other non-boolean tensor index is refused.
  CHECK_THROWS_WITH_AS(a.index({Tensor::from_vector<int64_t>({0, 1, 1, 0}, {2, 2})}), doctest::Contains("boolean mask"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(a.index({Tensor::from_vector<int64_t>({0}), 1}), doctest::Contains("boolean mask"), volt::Error);
  CHECK_THROWS_WITH_AS(a.index({Tensor::from_vector<float>({1, 0}) > 0.5}), doctest::Contains("leading dims"),
                       volt::Error);
  Tensor w = grid().requires_grad_();
  CHECK_THROWS_WITH_AS(w.index({w > 1.0}), doctest::Contains("not differentiable"), volt::Error);
}
