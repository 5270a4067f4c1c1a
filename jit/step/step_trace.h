// Tracing a whole training step (used by jit/step/step.cpp).
//
// The state tensors (parameters, moments, ...) become traced values for the
// time of the trace: their TensorImpl, shared by the module and the optimizer,
// loses its storage and stands for a proxy, so whatever holds them traces
// through them.  Ops are recorded with the eager tape on top (so backward()
// walks traced values and its VJP rules are recorded), and an in-place write
// to a traced value rebinds it to the written value.  Afterwards every state
// tensor gets its storage back.
#pragma once
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <volt/jit/step/step.h>
#include <volt/jit/trace.h>

namespace volt::jit {

struct StepTraceResult {
  std::shared_ptr<ProxyNames> names;
  // inputs: the state, then the step's arguments, then `constants`.  outputs: the step's
  // outputs, then the new value of each state tensor that changed, then (when
  // asked for) each parameter's gradient.
  Trace trace;
  size_t num_outputs = 0;
  std::vector<size_t> updated_state;  // state index of each new state value
  std::vector<size_t> grad_of;        // state index of each gradient output
  std::vector<Tensor> constants;      // tensors with data the step made while traced (an arange)
  std::unordered_map<int64_t, StepSection> section_of;  // by the id of a value the trace makes
};

StepTraceResult trace_step(const CompiledStep::Fn& fn, const std::vector<Tensor>& state,
                           const std::vector<std::string>& state_names, const std::vector<Tensor>& args,
                           bool write_grads);

}  // namespace volt::jit
