#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <volt/autograd/hooks.h>
#include <volt/tensor/ops.h>

using namespace volt;

TEST_CASE("backward hooks: a leaf is ready once, with its final gradient, last used first") {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{3, 4}).requires_grad_();
  Tensor c = Tensor::from_vector(std::vector<float>{5, 6}).requires_grad_();  // not in the graph
  std::vector<std::string> events;
  std::vector<std::vector<float>> grad_at_ready;
  int64_t h = autograd::add_backward_hooks(
      {.grad_ready =
           [&](const std::shared_ptr<TensorImpl>& leaf) {
             events.push_back(leaf == a.impl_ptr() ? "a" : leaf == b.impl_ptr() ? "b" : "?");
             grad_at_ready.push_back(Tensor(leaf->grad).to_vector<float>());
           },
       .finished = [&] { events.push_back("end"); }});
  // a is used twice: early (a * a) and late (* a); b once, after a's first use.
  Tensor loss = ((a * a) * b * a).sum();
  loss.backward();
  autograd::remove_backward_hooks(h);
  REQUIRE(events.size() == 3);
  // b's only use is nearer the loss than a's first one: b is final first.
  CHECK(events == std::vector<std::string>{"b", "a", "end"});
  // d/da (a^3 b) = 3 a^2 b; d/db = a^3: what the hook saw is the final gradient.
  CHECK(grad_at_ready[0] == std::vector<float>{1, 8});
  CHECK(grad_at_ready[1] == std::vector<float>{9, 48});
  CHECK(a.grad().to_vector<float>() == grad_at_ready[1]);
  CHECK_FALSE(c.grad().defined());
  // Removed: another backward calls nothing.
  (a * 2.0).sum().backward();
  CHECK(events.size() == 3);
}
