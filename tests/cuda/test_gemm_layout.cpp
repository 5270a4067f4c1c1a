// The arguments the CUDA matmul hands cuBLAS, checked without a GPU: a naive
// column-major GEMM written from the BLAS definition reads the operands exactly
// as cuBLAS would (pointer, op, leading dimension) and must give the CPU matmul.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <functional>

#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;

namespace {

// C (column-major, ldc) = op(A) (m x k) * op(B) (k x n), BLAS's gemm.
void reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) {
        double a = ta ? A[l + i * lda] : A[i + l * lda];
        double b = tb ? B[j + l * ldb] : B[l + j * ldb];
        acc += a * b;
      }
      C[i + j * ldc] = static_cast<float>(acc);
    }
}

// The call gemm_2d (tensor/cuda/matmul.cpp) makes, cuda::gemm_call, run by
// the reference in place of cublasSgemm (packing first where it packs).
Tensor as_cublas_would(Tensor a, Tensor b) {
  if (!cuda::gemm_operand(a.sizes(), a.strides())) a = a.contiguous();
  if (!cuda::gemm_operand(b.sizes(), b.strides())) b = b.contiguous();
  const std::optional<cuda::GemmCall> c = cuda::gemm_call(a.sizes(), a.strides(), b.sizes(), b.strides());
  REQUIRE(c.has_value());
  // The leading dimensions cuBLAS insists on: at least the rows of each stored matrix.
  CHECK(c->ld_first >= (c->trans_first ? c->inner : c->rows));
  CHECK(c->ld_second >= (c->trans_second ? c->cols : c->inner));
  CHECK(c->ld_out >= c->rows);
  Tensor out = Tensor::empty({a.size(0), b.size(1)});
  reference_gemm(c->trans_first, c->trans_second, c->rows, c->cols, c->inner, b.data_ptr<float>(), c->ld_first,
                 a.data_ptr<float>(), c->ld_second, out.data_ptr<float>(), c->ld_out);
  return out;
}

}  // namespace

TEST_CASE("cuda matmul: cuBLAS operands for row-major, transposed, sliced and odd views") {
  manual_seed(9);
  using View = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    Shape a, b;
    View va, vb;
  };
  View id = [](const Tensor& t) { return t; };
  View tr = [](const Tensor& t) { return t.t(); };
  const Case cases[] = {
      {"plain", {5, 7}, {7, 3}, id, id},
      {"a transposed", {7, 5}, {7, 3}, tr, id},
      {"b transposed (linear's w^T)", {5, 7}, {3, 7}, id, tr},
      {"both transposed", {7, 5}, {3, 7}, tr, tr},
      {"column slice", {5, 9}, {7, 3}, [](const Tensor& t) { return t.narrow(1, 1, 7); }, id},
      {"row slice of a transpose", {9, 5}, {7, 3}, [](const Tensor& t) { return t.t().narrow(1, 2, 7); }, id},
      {"every other column (packed)", {5, 14}, {7, 3}, [](const Tensor& t) {
         return t.reshape({5, 7, 2}).select(2, 0); }, id},
      {"broadcast row (packed)", {1, 7}, {7, 3}, [](const Tensor& t) { return t.expand({5, 7}); }, id},
      {"one row", {1, 7}, {7, 3}, id, id},
      {"one column", {5, 7}, {7, 1}, id, id},
      {"one column transposed", {5, 7}, {1, 7}, id, tr},
      {"inner 1", {5, 1}, {1, 3}, id, id},
      {"outer product of vectors", {5, 1}, {3, 1}, id, tr},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Tensor a = c.va(Tensor::randn(c.a)), b = c.vb(Tensor::randn(c.b));
    Tensor want = matmul(a, b);
    Tensor got = as_cublas_would(a, b);
    CHECK(volt::testing::max_abs_diff(got, want) < 1e-4);
  }
}
#endif  // VOLT_WITH_CUDA
