// Batched matmul as attention uses it: transpose and permute views as
// operands, broadcast batch dims whose gradients sum back, every mode.
#include <doctest/doctest.h>

#include <volt/autograd/gradcheck.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/modes.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_close;
using volt::testing::check_modes;
using volt::testing::ref_matmul;
using volt::testing::ref_of;

TEST_CASE("batched matmul of permuted and transposed views against loops") {
  manual_seed(12);
  // (B, T, H, D) -> (B, H, T, D), then q @ k^T: both operands strided views.
  Tensor q = Tensor::randn({2, 5, 3, 4}).permute({0, 2, 1, 3});
  Tensor k = Tensor::randn({2, 5, 3, 4}).permute({0, 2, 1, 3});
  Tensor att = matmul(q, k.transpose(-2, -1));
  CHECK(att.sizes() == Shape{2, 3, 5, 5});
  check_close("q @ k^T", att, ref_matmul(ref_of(q.contiguous()), ref_of(k.transpose(-2, -1).contiguous())), 1e-5,
              1e-5);
  Tensor y = matmul(att, q);  // (2, 3, 5, 5) @ (2, 3, 5, 4)
  check_close("att @ v", y, ref_matmul(ref_of(att), ref_of(q.contiguous())), 1e-5, 1e-5);
  // Broadcast batch dims: (2, 1, 5, 4) @ (3, 4, 2) -> (2, 3, 5, 2).
  Tensor a = Tensor::randn({2, 1, 5, 4}), b = Tensor::randn({3, 4, 2});
  check_close("broadcast", matmul(a, b), ref_matmul(ref_of(a), ref_of(b)), 1e-5, 1e-5);
}

TEST_CASE("batched matmul: gradients sum over broadcast batch dims (f64, finite differences)") {
  manual_seed(13);
  Tensor a = Tensor::randn({2, 1, 3, 4}, DType::f64), b = Tensor::randn({3, 4, 2}, DType::f64);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {a, b}).ok);
  Tensor c = Tensor::randn({4, 2}, DType::f64);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {a, c}).ok);
  Tensor q = Tensor::randn({2, 3, 2, 4}, DType::f64);
  CHECK(autograd::gradcheck(
            [](const std::vector<Tensor>& x) {
              Tensor v = x[0].permute({0, 2, 1, 3});
              return matmul(v, v.transpose(-2, -1));
            },
            {q})
            .ok);
  // The broadcast operand's gradient has its own shape.
  Tensor al = a.clone().requires_grad_(), bl = b.clone().requires_grad_();
  matmul(al, bl).sum().backward();
  CHECK(al.grad().sizes() == a.sizes());
  CHECK(bl.grad().sizes() == b.sizes());
}

TEST_CASE("batched matmul with views: the jit, compile_step and the lazy device equal eager") {
  manual_seed(14);
  Tensor x = Tensor::randn({2, 4, 6});
  check_modes(
      [](const std::vector<Tensor>& a) {
        auto p = a[0].reshape({2, 4, 2, 3}).permute({0, 2, 1, 3});  // (B, H, T, D)
        Tensor att = softmax(matmul(p, p.transpose(-2, -1)) * 0.5, -1);
        return matmul(att, p).permute({0, 2, 1, 3}).reshape({2, 4, 6});
      },
      {x});
  Tensor a = Tensor::randn({2, 1, 3, 4}), b = Tensor::randn({3, 4, 2});
  check_modes([](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }, {a, b});
}
