// Chapter 4, the grad pass and rematerialisation (docs/tutorial/04_grad.md):
// a forward trace becomes an augmented forward (results and what backward
// needs) and a backward trace, from the same VJP rules eager autograd uses.
#include <iostream>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  // A layer with dropout: z = dropout(relu(x @ w^T), 0.5), summed.
  auto f = jit::jit(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{dropout(relu(linear(in[0], in[1])), 0.5, true).sum()};
      },
      {"x", "w"});
  Tensor x = Tensor::randn({2, 3}), w = Tensor::randn({4, 3}).requires_grad_();
  Tensor loss = f({x, w})[0];
  loss.backward();
  std::cout << "loss = " << loss << "\nw.grad() = " << w.grad() << "\n";

  const jit::Trace& fwd = jit::last_traces(f).back();
  const jit::Trace& bwd = jit::last_backward_traces(f).back();
  std::cout << "\nSaved for backward: " << fwd.outputs.size() - fwd.split << " tensors\n";
  std::cout << "\nThe augmented forward:\n" << fwd.str();
  std::cout << "\nThe backward:\n" << bwd.str();
  return 0;
}
