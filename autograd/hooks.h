// Hooks on backward(): a callback when a leaf's gradient is final for this
// backward (nothing more will be added to it), and one when backward ends.
// Data-parallel training (nn/parallel/ddp.h) starts each bucket's all-reduce
// from the first and waits for them in the second.
//
//   auto h = volt::autograd::add_backward_hooks({
//       .grad_ready = [](const std::shared_ptr<volt::TensorImpl>& leaf) { /* leaf->grad is final */ },
//       .finished = [] { /* after the last node ran */ }});
//   loss.backward();
//   volt::autograd::remove_backward_hooks(h);
//
// grad_ready is called once per leaf the graph reaches, in the order the
// leaves become final, also for a leaf whose gradient stayed undefined (the
// branches to it carried none).  Leaves the graph does not reach get no call.
// Both run on the thread that runs backward, with grad mode off.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include <volt/tensor/tensor.h>

namespace volt::autograd {

struct BackwardHooks {
  std::function<void(const std::shared_ptr<TensorImpl>& leaf)> grad_ready;
  std::function<void()> finished;
};

// Returns a handle for remove_backward_hooks.
int64_t add_backward_hooks(BackwardHooks hooks);
void remove_backward_hooks(int64_t handle);

}  // namespace volt::autograd
