// A contiguous tensor summed over its leading dims (a bias gradient: (rows, n)
// -> (n)) runs a column-blocked loop on the CPU (tensor/cpu/reductions.cpp):
// each column's sum must be the f64 sum of its rows in row order, rounded
// once to the output type, bit for bit, at any width (whole blocks of columns
// and the rest) and any thread count.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

struct Threads {
  int prev = cpu::num_threads();
  explicit Threads(int n) { cpu::set_num_threads(n); }
  ~Threads() { cpu::set_num_threads(prev); }
};

// out[j] = (float) sum_i (double) x[i, j], rows added in order.
std::vector<float> column_sums_f64(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += static_cast<double>(x[static_cast<size_t>(i * cols + j)]);
    out[static_cast<size_t>(j)] = static_cast<float>(s);
  }
  return out;
}

}  // namespace

TEST_CASE("column sums: a sum over the leading dims is each column's f64 sum in row order, bit for bit") {
  manual_seed(5);
  for (int threads : {1, 2})
    for (int64_t rows : {1, 8, 300})
      for (int64_t cols : {1, 31, 32, 65, 200, 512}) {
        CAPTURE(threads);
        CAPTURE(rows);
        CAPTURE(cols);
        Threads t(threads);
        // Magnitudes spread over about 2^-35 .. 2^35.  (The f64 sum rounded to
        // f32 hides the order of the additions almost always: a test reversing
        // it passed; one dropping a row of a block fails.)
        const Tensor x = mul(Tensor::randn({rows, cols}), exp(mul(Tensor::randn({rows, cols}), 8.0)));
        const std::vector<float> want = column_sums_f64(x.to_vector<float>(), rows, cols);
        const std::vector<float> got = sum(x, {0}).to_vector<float>();
        REQUIRE(got.size() == want.size());
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        // Two leading dims, (2, rows, cols) -> (cols): the same walk over 2 rows as many.
        const Tensor x3 = cat({x, x}, 0).reshape({2, rows, cols});
        const std::vector<float> want3 = column_sums_f64(x3.to_vector<float>(), 2 * rows, cols);
        const std::vector<float> got3 = sum(x3, {0, 1}).to_vector<float>();
        CHECK(std::memcmp(got3.data(), want3.data(), want3.size() * sizeof(float)) == 0);
      }
}

TEST_CASE("column sums: integers sum exactly, in i64") {
  const int64_t rows = 70, cols = 67;
  const Tensor x = Tensor::randint(-1000, 1000, {rows, cols});
  const std::vector<int64_t> v = x.to_vector<int64_t>();
  const std::vector<int64_t> got = sum(x, {0}).to_vector<int64_t>();
  for (int64_t j = 0; j < cols; ++j) {
    int64_t s = 0;
    for (int64_t i = 0; i < rows; ++i) s += v[static_cast<size_t>(i * cols + j)];
    CHECK(got[static_cast<size_t>(j)] == s);
  }
}
