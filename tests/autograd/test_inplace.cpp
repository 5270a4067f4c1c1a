// In-place writes and autograd, as PyTorch has them: version counters make
// backward through an overwritten saved tensor an error naming the op; writes
// to recorded tensors are recorded; overlapping destinations are refused.
#include <doctest/doctest.h>

#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/tensor.h>

using namespace volt;

namespace {
std::vector<float> vec(const Tensor& t) { return t.to_vector<float>(); }
Tensor leaf(std::vector<float> v) { return Tensor::from_vector<float>(v).requires_grad_(); }
}  // namespace

TEST_CASE("inplace: every write bumps the version its views share") {
  Tensor a = Tensor::zeros({2, 3});
  Tensor v = a.select(0, 1);
  CHECK(a.version() == 0);
  v.fill_(1.0);
  CHECK(a.version() == 1);
  CHECK(v.version() == 1);
  a.add_(1.0);
  a.mul_(2.0);
  a.copy_(Tensor::ones({3}));
  CHECK(v.version() == 4);
  CHECK(a.detach().version() == 4);  // detach shares the counter, as in PyTorch
  CHECK(Tensor::zeros({1}).version() == 0);
}

TEST_CASE("inplace: backward through a saved tensor written since is an error naming the op") {
  // y*y saves y; y.mul_(10) then changes it.  PyTorch refuses; the old answer was [80, 160, 240].
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum();
  y.mul_(10.0);
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("mul_backward"), Error);
}

TEST_CASE("inplace: a write the rule does not read is allowed") {
  // add saves only shapes: y + 1 does not care what y holds later.
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  Tensor z = (y + 1.0).sum();
  {
    NoGradGuard g;
    y.mul_(10.0);
  }
  z.backward();
  CHECK(vec(x.grad()) == std::vector<float>{2, 2, 2});
  // mul by a constant reads only the constant's side.
  Tensor x2 = leaf({1, 2, 3});
  Tensor w = Tensor::from_vector<float>({4, 5, 6});
  Tensor z2 = (x2 * w).sum();
  w.fill_(0.0);  // w needs no grad, so x2 * w's rule reads w: refused
  CHECK_THROWS_WITH_AS(z2.backward(), doctest::Contains("input 1 of mul"), Error);
}

TEST_CASE("inplace: writes to a recorded tensor are recorded") {
  // y = x*2; y.mul_(3); d(sum y)/dx = 6 (the old answer was 2).
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  y.mul_(3.0);
  CHECK(vec(y) == std::vector<float>{6, 12, 18});
  y.sum().backward();
  CHECK(vec(x.grad()) == std::vector<float>{6, 6, 6});

  // add_ of a tensor that requires grad: both sides get their gradient.
  Tensor a = leaf({1, 2}), b = leaf({10, 20});
  Tensor s = a * 1.0;
  s.add_(b * b, 0.5);  // s = a + b^2/2
  s.sum().backward();
  CHECK(vec(a.grad()) == std::vector<float>{1, 1});
  CHECK(vec(b.grad()) == std::vector<float>{10, 20});

  // mul_ by a tensor that requires grad keeps the old value for its gradient.
  Tensor p = leaf({1, 2}), q = leaf({3, 5});
  Tensor r = p * 1.0;
  r.mul_(q);  // r = p*q
  (r * r).sum().backward();  // d/dp = 2 p q^2, d/dq = 2 p^2 q
  CHECK(vec(p.grad()) == std::vector<float>{18, 100});
  CHECK(vec(q.grad()) == std::vector<float>{6, 40});

  // copy_ of a leaf into a plain tensor: the tensor now depends on the leaf.
  Tensor src = leaf({1, 2});
  Tensor dst = Tensor::zeros({2, 2});
  dst.copy_(src);  // broadcast over rows
  CHECK(dst.requires_grad());
  (dst * 3.0).sum().backward();
  CHECK(vec(src.grad()) == std::vector<float>{6, 6});

  // Overwritten by a value that needs no grad: cut from the graph.
  Tensor x3 = leaf({1, 2});
  Tensor y3 = x3 * 2.0;
  y3.fill_(7.0);
  CHECK_FALSE(y3.requires_grad());
  Tensor t3 = (y3 * x3).sum();
  t3.backward();
  CHECK(vec(x3.grad()) == std::vector<float>{7, 7});
}

TEST_CASE("inplace: refused writes") {
  Tensor w = leaf({1, 2, 3});
  CHECK_THROWS_WITH_AS(w.mul_(2.0), doctest::Contains("mul_: a leaf tensor that requires grad"), Error);
  CHECK_THROWS_WITH_AS(w.narrow(0, 0, 2).add_(1.0), doctest::Contains("add_: cannot write in place into a view"),
                       Error);
  {
    NoGradGuard g;  // an optimizer step: allowed
    w.mul_(2.0);
  }
  CHECK(vec(w) == std::vector<float>{2, 4, 6});

  // An expanded destination: one element stands for many.
  Tensor base = Tensor::zeros({1, 3});
  Tensor e = base.expand({4, 3});
  CHECK_THROWS_WITH_AS(e.copy_(Tensor::ones({4, 3})), doctest::Contains("copy_: the destination cpu f32[4, 3] is an expanded view"),
                       Error);
  CHECK_THROWS_WITH_AS(e.add_(1.0), doctest::Contains("add_"), Error);
  CHECK(vec(base) == std::vector<float>{0, 0, 0});
  // Size-1 dims with stride 0 hold one element each: fine.
  Tensor one = Tensor::zeros({3}).unsqueeze(0).expand({1, 3});
  one.fill_(2.0);
}

TEST_CASE("inplace: an optimizer step is a write that saved tensors notice") {
  // backward(retain_graph) then step then backward again: the graph saved the
  // old weight, so the second backward is refused (as in PyTorch), not run on
  // the new weight.
  Tensor w = leaf({1, 2});
  Tensor x = Tensor::from_vector<float>({3, 4});
  Tensor loss = (w * x * w).sum();
  loss.backward({}, /*retain_graph=*/true);
  nn::SGD opt({w}, {.lr = 0.1});
  opt.step();
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("mul_backward"), Error);
  nn::Adam adam({w});
  const uint64_t before = w.version();
  adam.step();
  CHECK(w.version() > before);
}
