// N training steps of a module on the lazy device, for the example and the
// benchmark.  The step is the tutorial's: inputs to the lazy device, zero_grad,
// forward, loss, backward, optimizer step, mark_step.
//
//   net->to(volt::kLazy);
//   volt::nn::Adam opt(net->parameters());
//   double s = volt::lazy_example::train_steps(*net, opt, batches, 100);  // seconds
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <volt/data/dataloader.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/nn/loss.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>

namespace volt::lazy_example {

// Runs `steps` steps over `batches` (CPU tensors, reused in turn) and returns
// the seconds they took, graphs waited for.  `on_step(step, loss)` sees each
// step's loss tensor after mark_step (reading it costs nothing more then).
inline double train_steps(nn::Module& net, nn::Optimizer& opt, const std::vector<data::Batch>& batches,
                          int64_t steps,
                          const std::function<void(int64_t, const Tensor&)>& on_step = nullptr) {
  nn::CrossEntropyLoss loss_fn;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const data::Batch& b = batches[static_cast<size_t>(step) % batches.size()];
    Tensor x = b.data.to(kLazy), y = b.target.to(kLazy);
    opt.zero_grad();
    Tensor loss = loss_fn(net(x), y);
    loss.backward();
    opt.step();
    lazy::mark_step();
    if (on_step) on_step(step, loss);
  }
  lazy::wait_device_ops();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace volt::lazy_example
