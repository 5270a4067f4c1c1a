// The interpreter: what runs an execution trace.  Each bound symbol goes to
// the executor the claim pass gave it (Executor::execute): a fusion region to
// its kernel, a user's op to its implementation, the rest, prim by prim, to
// the eager kernels.  Values live in a vector indexed by proxy id and are
// dropped where the trace says `del`.
#pragma once
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/random.h>

namespace volt::jit {

// Readies a trace for repeated runs (interpret does it on the fly otherwise).
void prepare(Trace& trace);

// Runs a trace on real tensors.  Random draws use `rng` when given (backward
// regenerating forward's draws), else counters reserved from the global
// generator; `rng_used` reports which.
std::vector<Tensor> interpret(const Trace& trace, const std::vector<Tensor>& inputs,
                              const PhiloxState* rng = nullptr, PhiloxState* rng_used = nullptr);

}  // namespace volt::jit
