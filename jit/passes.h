// Passes over traces.  Each takes a trace and returns a new one, stamped with
// its name and how long it took, so the list of traces tells the whole story.
#pragma once
#include <chrono>

#include <volt/jit/trace.h>

namespace volt::jit {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Replaces every op by the prims it decomposes into.
Trace decompose_pass(const Trace& t);
// Dead-code elimination, then common-subexpression elimination (random draws are never merged).
Trace dce_cse_pass(const Trace& t);

}  // namespace volt::jit
