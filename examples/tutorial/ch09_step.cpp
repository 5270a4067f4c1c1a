// Chapter 9, compiling the whole step (docs/tutorial/09_step.md): forward,
// loss, backward() and the optimizer's update traced into one program that
// updates the parameters in place, from one memory arena.
#include <cstdio>
#include <iostream>

#include <volt/jit/step/step.h>
#include <volt/nn/linear.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  auto net = std::make_shared<nn::Linear>(3, 2);
  nn::SGD opt(net->parameters(), {.lr = 0.5});
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy((*net)(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      {.state = {*net, opt}});
  Tensor x = Tensor::randn({4, 3}), y = Tensor::from_vector<int64_t>({0, 1, 1, 0});
  for (int i = 0; i < 5; ++i) std::printf("step %d: loss %.4f\n", i, step(x, y).item<double>());
  std::printf("compiled %lld time(s), %lld cache hits, arena %zu bytes\n", (long long)step.compiles(),
              (long long)step.cache_hits(), step.arena_bytes());
  std::cout << "\nThe program, in sections:\n" << step.last_trace_str();
  return 0;
}
