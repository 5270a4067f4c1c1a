// The trace checker: a printed trace must be a valid program.  Every value is
// defined once, before it is read (an input, or an output of an earlier line;
// inside a fusion or a decomposition, of an earlier line there); nothing is
// read after its `del`; everything the trace returns (and, for an augmented
// forward, its flat_args, the inputs) is still there at the return; a
// scalar read by name (`f0`) is one the backward unpacks from C1, with the
// value the line computes with.  The jit
// checks every trace it makes, so a pass that breaks one fails loudly.
#pragma once
#include <string>

#include <volt/jit/trace.h>

namespace volt::jit {

// The first problem found, or "" when the trace is valid.
std::string trace_problem(const Trace& t);
// Throws volt::Error naming the trace and the problem.
void check_trace(const Trace& t);

}  // namespace volt::jit
