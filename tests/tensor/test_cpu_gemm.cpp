// The CPU GEMM's own kernels against triple loops in double, on the layouts
// training produces: linear's x W^T (+ bias), the input gradient g W and the
// weight gradient g^T x, with sizes that leave partial register tiles in every
// direction.  Skinny kernels: few rows, or a short inner dimension (a batch of
// 8).  Packed kernels: larger products (a batch of 64 and up).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
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

namespace {

// C = A B (+ bias) as one fused multiply-add chain per element, k ascending:
// the order the packed kernels promise, whatever the blocking and threads.
template <class T>
std::vector<T> fma_chain(const Tensor& a, const Tensor& b, const Tensor* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<T> av = a.to_vector<T>(), bv = b.to_vector<T>(), out(size_t(m * n));
  std::vector<T> biasv = bias ? bias->to_vector<T>() : std::vector<T>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T c = 0;
      for (int64_t p = 0; p < k; ++p) c = std::fma(av[size_t(i * k + p)], bv[size_t(p * n + j)], c);
      out[size_t(i * n + j)] = bias ? c + biasv[size_t(j)] : c;
    }
  return out;
}

template <class T>
void check_bitwise(const std::string& label, const Tensor& got, const std::vector<T>& want) {
  std::vector<T> g = got.to_vector<T>();
  REQUIRE(g.size() == want.size());
  int64_t differ = 0;
  for (size_t i = 0; i < g.size(); ++i) differ += std::memcmp(&g[i], &want[i], sizeof(T)) != 0;
  INFO(label);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("packed products: every layout against loops, and bit for bit the fma chain") {
  // m and n leave partial panels (8 rows, 32 float or 16 double columns); k = 1100
  // takes two k-blocks, so the second continues from the first's partial sums.
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t m : {17, 40, 103})
      for (int64_t k : {17, 64, 1100})
        for (int64_t n : {16, 33, 70}) {
          // A chain of 1100 float roundings drifts by a few 1e-5 from the exact sum.
          const double tol = dt == DType::f32 && k > 64 ? 1e-4 : 1e-5;
          const std::string label = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                    " k=" + std::to_string(k) + " n=" + std::to_string(n);
          Tensor x = sample({m, k}, dt, 81), w = sample({n, k}, dt, 82), bias = sample({n}, dt, 83);
          Tensor g = sample({m, n}, dt, 84), xt = sample({k, m}, dt, 85);
          Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
          Tensor y = linear(x, w, bias);
          check_close("x W^T + b " + label, y, ref_zip(plain, ref_of(bias), [](double p, double q) {
                        return p + q;
                      }),
                      tol, tol);
          Ref gw = ref_matmul(ref_of(g), ref_of(w));
          check_close("g W " + label, matmul(g, w), gw, tol, tol);
          check_close("g W, g column-major " + label, matmul(transposed_layout(g), w), gw, tol, tol);
          // (k, m) stored, used transposed: A with unit row stride, as in g^T x.
          check_close("A^T B " + label, matmul(xt.t(), w.t()), ref_matmul(ref_of(xt.t()), ref_of(w.t())), tol, tol);
          check_close("strided " + label, matmul(strided(x), strided(w.t())), plain, tol, tol);
          // A broadcast (stride 0) row: every row of C the same.
          Tensor row = sample({1, k}, dt, 86).expand({m, k});
          check_close("broadcast A " + label, matmul(row, w.t()), ref_matmul(ref_of(row), ref_of(w.t())), tol, tol);
          if (dt == DType::f32)
            check_bitwise<float>("fma chain " + label, y, fma_chain<float>(x, w.t(), &bias));
          else
            check_bitwise<double>("fma chain " + label, matmul(x, w.t()), fma_chain<double>(x, w.t(), nullptr));
        }
}

TEST_CASE("packed products: the seed model's shapes at batch 64 and 256") {
  for (int64_t batch : {64, 256})
    for (auto [in, out] : {std::pair<int64_t, int64_t>{784, 784}, {784, 28}}) {
      Tensor x = sample({batch, in}, DType::f32, 87), w = sample({out, in}, DType::f32, 88);
      Tensor bias = sample({out}, DType::f32, 89), g = sample({batch, out}, DType::f32, 90);
      const std::string label = std::to_string(batch) + ": " + std::to_string(in) + "->" + std::to_string(out);
      Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
      check_close("forward " + label, linear(x, w, bias),
                  ref_zip(plain, ref_of(bias), [](double p, double q) { return p + q; }), 1e-4, 1e-4);
      check_close("input grad " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), 1e-4, 1e-4);
      check_close("weight grad " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), 1e-4, 1e-4);
      check_bitwise<float>("weight grad chain " + label, matmul(g.t(), x), fma_chain<float>(g.t(), x, nullptr));
    }
}

TEST_CASE("packed products: more than 4096 rows or columns run block by block") {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{4105, 40}, {20, 4100}}) {
    const int64_t k = 18;
    Tensor x = sample({m, k}, DType::f32, 71), w = sample({n, k}, DType::f32, 72), bias = sample({n}, DType::f32, 73);
    const std::string label = "m=" + std::to_string(m) + " n=" + std::to_string(n);
    Tensor y = linear(x, w, bias);
    check_close("x W^T + b " + label, y,
                ref_zip(ref_matmul(ref_of(x), ref_of(w.t())), ref_of(bias), [](double p, double q) { return p + q; }),
                1e-5, 1e-5);
    check_bitwise<float>("fma chain " + label, y, fma_chain<float>(x, w.t(), &bias));
  }
}
