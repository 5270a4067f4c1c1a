// The grad pass: from a forward trace, an augmented forward trace (outputs plus
// what backward needs) and a backward trace, both made by tracing the same VJP
// rules eager autograd runs (autograd/vjp.cpp).  In jit/grad.cpp, in order:
//   1. the VJP walk (walk_vjps): each unit's rule traced in reverse order;
//   2. the choice of saved values (choose_saved): saved, or regenerated when
//      cheap to make again from nothing saved (a dropout mask from its seed);
//   3. rematerialisation (rematerialize): each regenerated value right before
//      its first use in backward, so it fuses with its reader;
//   4. placement in the forward (augmented_forward): ops opened where backward
//      reads a value made inside them, the saved values returned.
#pragma once
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

struct GradTraces {
  Trace forward;   // returns the outputs, then the saved tensors
  Trace backward;  // inputs: saved tensors, then one cotangent per output; returns input grads
  std::vector<int> grad_input_index;  // for each backward output, which forward input it belongs to
};

// `requires_grad[i]` says whether forward input i needs a gradient.  Values
// backward needs that are cheap to regenerate (random masks: a chain of
// elementwise prims from `uniform`) are recomputed in backward, not saved.
// Executors in the list may replace an op's VJP by their grad transform.
class Executor;
GradTraces grad_pass(const Trace& forward, ProxyNames& names, const std::vector<bool>& requires_grad,
                     const std::vector<Executor*>& executors = {});

}  // namespace volt::jit
