// Passes over traces.  Each takes a trace and returns a new one, stamped with
// its name and how long it took, so the list of traces tells the whole story.
#pragma once
#include "jit/trace.h"

namespace volt::jit {

// Replaces every op by the prims it decomposes into.
Trace decompose_pass(const Trace& t);
// Dead-code elimination, then common-subexpression elimination (random draws are never merged).
Trace dce_cse_pass(const Trace& t);

}  // namespace volt::jit
