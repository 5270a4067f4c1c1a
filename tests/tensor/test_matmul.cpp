// matmul (1-D, 2-D, batched with broadcasting, any operand layout) and linear,
// against triple loops in double.
#include <doctest/doctest.h>

#include <string>

#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

// matmul's reference with NumPy's 1-D rules: a 1-D left operand gets a leading
// unit dim, a 1-D right operand a trailing one, both removed afterwards.
Ref ref_matmul_any(Ref a, Ref b) {
  bool a1 = a.sizes.size() == 1, b1 = b.sizes.size() == 1;
  if (a1) a.sizes.insert(a.sizes.begin(), 1);
  if (b1) b.sizes.push_back(1);
  Ref r = ref_matmul(a, b);
  if (b1) r.sizes.pop_back();
  if (a1) r.sizes.erase(r.sizes.end() - (b1 ? 1 : 2));
  return r;
}

}  // namespace

TEST_CASE("matmul of every rank combination against loops") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5}, {5}},                    // dot
      {{5}, {5, 3}},                 // vector-matrix
      {{4, 5}, {5}},                 // matrix-vector
      {{4, 5}, {5, 3}},              // matrix-matrix
      {{2, 4, 5}, {5, 3}},           // batched left
      {{4, 5}, {2, 5, 3}},           // batched right
      {{2, 1, 4, 5}, {3, 5, 2}},     // broadcast batch dims -> (2, 3, 4, 2)
      {{5}, {2, 5, 3}},              // 1-D with batched
      {{2, 3, 4, 5}, {5}},           // batched with 1-D
      {{1, 7}, {7, 1}},              // 1x1 result
      {{3, 0}, {0, 4}},              // empty inner dim: zeros
      {{0, 3}, {3, 4}},              // empty rows
      {{2, 3}, {3, 0}},              // empty cols
  };
  for (DType dt : {DType::f32, DType::f64})
    for (auto [sa, sb] : shapes) {
      Tensor a = sample(sa, dt, 71), b = sample(sb, dt, 72);
      Ref want = ref_matmul_any(ref_of(a), ref_of(b));
      std::string label = std::string(dtype_name(dt)) + " " + shape_str(sa) + " @ " + shape_str(sb);
      Tensor out = matmul(a, b);
      CHECK(out.dtype() == dt);
      check_close(label, out, want, 1e-5, 1e-5);
      check_close(label + " (strided operands)", matmul(strided(a), strided(b)), want, 1e-5, 1e-5);
      check_close(label + " (method)", a.matmul(b), want, 1e-5, 1e-5);
    }
}

TEST_CASE("matmul with transposed, narrowed and expanded operands") {
  Tensor a = sample({4, 6}, DType::f32, 73), b = sample({6, 3}, DType::f32, 74);
  Ref ra = ref_of(a), rb = ref_of(b);
  Ref want = ref_matmul(ra, rb);
  // Stored transposed (column-major) on either side.
  check_close("a^T^T @ b", matmul(transposed_layout(a), b), want, 1e-5, 1e-5);
  check_close("a @ b^T^T", matmul(a, transposed_layout(b)), want, 1e-5, 1e-5);
  check_close("both transposed", matmul(transposed_layout(a), transposed_layout(b)), want, 1e-5, 1e-5);
  // x^T @ y with x (6, 4): the transpose of a real tensor.
  Tensor x = sample({6, 4}, DType::f32, 75);
  check_close("x.t() @ b", matmul(x.t(), b), ref_matmul(ref_of(x.t()), rb), 1e-5, 1e-5);
  check_close("a @ y.t()", matmul(a, sample({3, 6}, DType::f32, 76).t()),
              ref_matmul(ra, ref_of(sample({3, 6}, DType::f32, 76).t())), 1e-5, 1e-5);
  // A narrowed block inside a larger matrix (row stride larger than its width).
  Tensor big = sample({8, 10}, DType::f64, 77);
  Tensor blk = big.narrow(0, 2, 4).narrow(1, 3, 6);
  Tensor bb = sample({6, 2}, DType::f64, 78);
  check_close("narrowed block", matmul(blk, bb), ref_matmul(ref_of(blk), ref_of(bb)), 1e-10, 1e-10);
  // An expanded operand: every row the same (row stride 0).
  Tensor row = sample({1, 6}, DType::f32, 79).expand({5, 6});
  check_close("expanded rows", matmul(row, b), ref_matmul(ref_of(row), rb), 1e-5, 1e-5);
  // A batch expanded from one matrix, and a batched transposed operand.
  Tensor batch = a.unsqueeze(0).expand({3, 4, 6});
  Tensor bt = sample({3, 3, 6}, DType::f32, 80).transpose(1, 2);
  check_close("expanded batch @ transposed batch", matmul(batch, bt), ref_matmul(ref_of(batch), ref_of(bt)), 1e-5,
              1e-5);
}

TEST_CASE("matmul is exact on small integers in f32") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>{58, 64, 139, 154});
  CHECK(matmul(a.select(0, 0), a.select(0, 1)).item<float>() == 32.0f);
  CHECK(matmul(a.select(0, 0), a.select(0, 1)).dim() == 0);
}

TEST_CASE("linear with and without bias") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor w = sample({3, 5}, dt, 81), bias = sample({3}, dt, 82);
    for (Shape xs : {Shape{4, 5}, Shape{5}, Shape{2, 4, 5}, Shape{0, 5}}) {
      Tensor x = sample(xs, dt, 83);
      Ref wt = ref_of(w.t());
      Ref plain = ref_matmul_any(ref_of(x), wt);
      Ref biased = ref_zip(plain, ref_of(bias), [](double p, double q) { return p + q; });
      std::string label = std::string(dtype_name(dt)) + " x" + shape_str(xs);
      check_close("linear " + label, linear(x, w), plain, 1e-5, 1e-5);
      check_close("linear+bias " + label, linear(x, w, bias), biased, 1e-5, 1e-5);
      // Non-contiguous input and a weight stored transposed.
      check_close("linear strided " + label, linear(strided(x), transposed_layout(w), strided(bias)), biased, 1e-5,
                  1e-5);
    }
  }
}

TEST_CASE("matmul and linear reject mismatched operands") {
  Tensor x = Tensor::zeros({8, 784}), w = Tensor::zeros({28, 784});
  CHECK_THROWS_WITH_AS(matmul(x, w),
                       doctest::Contains("matmul: shapes [8, 784] and [28, 784] cannot be multiplied (784 != 28)"),
                       volt::Error);
  CHECK_NOTHROW(matmul(x, w.t()));
  CHECK_THROWS_AS(matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::f64)), volt::Error);
  CHECK_THROWS_AS(matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 2}, DType::i32)), volt::Error);
  CHECK_THROWS_AS(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), volt::Error);
  CHECK_THROWS_AS(matmul(Tensor::scalar_tensor(1.0, DType::f32), Tensor::zeros({2})), volt::Error);
  CHECK_THROWS_WITH_AS(linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 5})), doctest::Contains("linear"),
                       volt::Error);
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 5}), Tensor::zeros({4})), volt::Error);
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 5}), Tensor::zeros({5})), volt::Error);
}
