// A tensor a jitted call saved for backward, written in place before backward:
// an error, as in eager autograd, never a silently wrong gradient.
#include <doctest/doctest.h>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

using namespace volt;

TEST_CASE("jit backward refuses a saved input that was scaled in place since, as eager does") {
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{(a[0] * a[0]).sum()}; });
  Tensor x = Tensor::from_vector<float>({1, 2, 3}).requires_grad_();
  Tensor x2 = x * 1.0;  // not a leaf, so it may be written in place
  Tensor z = f(std::vector<Tensor>{x2}).at(0);
  {
    NoGradGuard g;
    x2.mul_(10.0);  // the value backward would read is gone
  }
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("modified by an in-place operation"), volt::Error);

  // Untouched, the same call gives the right gradient 2x.
  Tensor y = Tensor::from_vector<float>({1, 2, 3}).requires_grad_();
  Tensor z2 = f(std::vector<Tensor>{y * 1.0}).at(0);
  z2.backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
}
