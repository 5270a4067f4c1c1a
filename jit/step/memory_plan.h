// The memory plan of a compiled training step: one arena, every intermediate
// placed in it by liveness, state updated where it lives.
//
// Built from a step's final trace (claimed, fused, delete-last-used), whose
// inputs are the state tensors, then the step's arguments, and whose outputs
// are the step's outputs, then the new values of the state listed in
// `updated_state`.  Each value a prim or a fused kernel makes gets a byte
// range of the arena; two values share bytes only when their lifetimes (from
// the step that makes a value to the last step reading it or any view of it)
// do not overlap.  A state tensor's new value made by a fused kernel that
// reads the old value at the same element, for the last time, or that does
// not read it at all once nothing reads it any more, is written into the
// state's own memory (donation); any other new value is copied back at the
// end.  Views are taken afresh each run (no data), and a fused
// kernel's input that is not contiguous is first copied into its own range.
// So a run allocates no tensor memory (Storage::allocation_count stays the
// same), except for ops the plan cannot place (user operators), which run as
// the interpreter would run them.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/random.h>

namespace volt::jit {

class MemoryPlan {
 public:
  // With `outputs_in_arena` false, the step's outputs (all but the state's
  // new values) are allocated anew each run instead, for a caller that keeps
  // them past the next run; an output that is a view of an intermediate still
  // lives in the arena (in_arena tells).
  MemoryPlan(const Trace& trace, size_t num_state, size_t num_outputs, const std::vector<size_t>& updated_state,
             bool outputs_in_arena = true);
  ~MemoryPlan();
  // Runs the trace: `inputs` are the state then the arguments.  Writes the new
  // state values into the state tensors; returns the trace's outputs (the
  // step's outputs live in the arena until the next run).  Random draws use
  // `rng` when given, else counters reserved from the global generator.
  std::vector<Tensor> run(const Trace& trace, const std::vector<Tensor>& inputs, const PhiloxState* rng = nullptr);
  size_t arena_bytes() const;
  bool in_arena(const Tensor& t) const;
  // How many state updates are written in place (the rest are copied back).
  size_t donated() const;
  // The input indices (from `updated_state`) whose update is written in place.
  const std::vector<size_t>& donated_state() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace volt::jit
