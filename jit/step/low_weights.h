// A compiled step's low-precision weights: under autocast, each f32 parameter's
// bf16/f16 copy is state of the step, written by the optimizer's update.
//
// Traced as eager autocast runs it, a mixed-precision step casts every weight
// in its forward, every call:
//
//   t3 = volt.convert_element_type(_0_weight, bf16)       # forward
//   ...
//   t90 = ... Adam's update of _0_weight ...               # optimizer
//
// The pass "Low-precision weights" makes the copy an input of the program,
// `_0_weight_bf16`, that the forward reads instead of t3, and appends the cast
// of the updated weight as that input's new value:
//
//   t91 = volt.convert_element_type(t90, bf16)            # optimizer
//
// The fusion pass puts that cast in the update's region, so one pass over the
// weight stores p and bf16(p); the memory plan writes it into the copy's own
// memory.  The copies are the cast cache's (tensor/autocast.h), shared with
// eager autocast and Adam: before each call the step takes each parameter's
// copy from the cache, which casts it again if the parameter was written
// since (an in-place op, copy_, mark_modified, a checkpoint loaded); after the
// call the copies are current for the updated weights (autocast_copy_rewritten).
#pragma once
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

struct LowWeights {
  Trace trace;                 // the rewritten trace (provenance "Low-precision weights")
  std::vector<size_t> params;  // the state index of each copy's parameter, in input order
};

// `t`: a step's trace, inputs = the state (num_state), then the arguments and
// constants; outputs = num_outputs results, the new state values of
// `updated_state`, then gradients.  `cached[i]`: whether state i's casts are
// cached (an f32 parameter that requires grad).  The copies become inputs
// right after the state; their new values are appended to updated_state,
// with the index num_state + j of copy j.  Returns an empty list (and `t` as
// it is) when no cast qualifies.
LowWeights low_weights_pass(const Trace& t, ProxyNames& names, size_t num_state, size_t num_outputs,
                            std::vector<size_t>& updated_state, const std::vector<bool>& cached);

}  // namespace volt::jit
