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

// What gemm_2d (tensor/cuda/matmul.cpp) does, with the reference in place of cublasSgemm.
Tensor as_cublas_would(Tensor a, Tensor b) {
  auto la = cuda::gemm_operand(a.sizes(), a.strides()), lb = cuda::gemm_operand(b.sizes(), b.strides());
  if (!la) a = a.contiguous(), la = cuda::gemm_operand(a.sizes(), a.strides());
  if (!lb) b = b.contiguous(), lb = cuda::gemm_operand(b.sizes(), b.strides());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  // The leading dimension cuBLAS insists on: at least the rows of the stored matrix.
  CHECK(lb->ld >= (lb->trans ? k : n));
  CHECK(la->ld >= (la->trans ? m : k));
  Tensor out = Tensor::empty({m, n});
  reference_gemm(lb->trans, la->trans, n, m, k, b.data_ptr<float>(), lb->ld, a.data_ptr<float>(), la->ld,
                 out.data_ptr<float>(), n);
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
    auto g = got.to_vector<float>(), w = want.to_vector<float>();
    REQUIRE(g.size() == w.size());
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(double(g[i]) - w[i]));
    CHECK(worst < 1e-4);
  }
}
#endif  // VOLT_WITH_CUDA
