// The training step as an eager loop writes it: what the compile_step tests
// compile, and the reference they compare with.
#pragma once
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>

namespace volt::testing {

template <class Opt>
Tensor eager_step(nn::MLP& net, Opt& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace volt::testing
