// The CPU GEMM's skinny kernels (few rows, or a short inner dimension: a batch
// of 8) against triple loops in double, on the layouts training produces:
// linear's x W^T (+ bias), the input gradient g W and the weight gradient g^T x,
// with sizes that leave partial register tiles in every direction.
#include <doctest/doctest.h>

#include <string>

#include "tensor/ops.h"
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("skinny products: linear, input and weight gradients against loops") {
  const double tol = 1e-5;
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t m : {1, 3, 8, 13, 16, 17})
      for (int64_t k : {1, 7, 16, 37})
        for (int64_t n : {1, 5, 16, 30}) {
          const std::string label = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                    " k=" + std::to_string(k) + " n=" + std::to_string(n);
          Tensor x = sample({m, k}, dt, 91), w = sample({n, k}, dt, 92), bias = sample({n}, dt, 93);
          Tensor g = sample({m, n}, dt, 94);
          Ref wt = ref_of(w.t());
          Ref plain = ref_matmul(ref_of(x), wt);
          check_close("x W^T " + label, linear(x, w), plain, tol, tol);
          check_close("x W^T + b " + label, linear(x, w, bias), ref_zip(plain, ref_of(bias), [](double p, double q) {
                        return p + q;
                      }),
                      tol, tol);
          check_close("g W " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), tol, tol);
          check_close("g^T x " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), tol, tol);
          // The same products on strided (non-contiguous) operands take the general path.
          check_close("strided g W " + label, matmul(strided(g), strided(w)), ref_matmul(ref_of(g), ref_of(w)), tol,
                      tol);
        }
}

TEST_CASE("skinny products: the seed model's shapes at batch 8") {
  // 784 = 49 full register tiles; 28 and 10 leave partial ones.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{784, 784}, {784, 28}, {28, 10}}) {
    Tensor x = sample({8, in}, DType::f32, 95), w = sample({out, in}, DType::f32, 96);
    Tensor bias = sample({out}, DType::f32, 97), g = sample({8, out}, DType::f32, 98);
    const std::string label = std::to_string(in) + "->" + std::to_string(out);
    Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
    check_close("forward " + label, linear(x, w, bias),
                ref_zip(plain, ref_of(bias), [](double p, double q) { return p + q; }), 1e-4, 1e-4);
    check_close("input grad " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), 1e-4, 1e-4);
    check_close("weight grad " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), 1e-4, 1e-4);
  }
}
