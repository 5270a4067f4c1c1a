// Passes over traces.  Each takes a trace and returns a new one, stamped with
// its name and how long it took, so the list of traces tells the whole story.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Dead-code elimination, then common-subexpression elimination (random draws are never merged).
Trace dce_cse_pass(const Trace& t);

// The prim a top-level line computes its one output with: the line itself,
// or an op whose decomposition is that one prim alone (else null).
const BoundSymbol* sole_prim(const BoundSymbol& b);

// ReLU as compile_step and the lazy device record it (relu's decomposition):
//   mask = le(y, 0.0)            # also read by the backward's where(mask, 0.0, g)
//   out  = where(mask, 0.0, y)
// Given `readers`, the two top-level lines of t that read y (in either
// order), the lines of the pair: each line's sole prim (sole_prim) is
// le(y, 0) and where(that mask, 0, y), each with one output.  Else none.
struct RecordedRelu {
  size_t mask = 0;    // le(y, 0)
  size_t select = 0;  // where(mask, 0, y)
};
std::optional<RecordedRelu> recorded_relu(const Trace& t, const std::vector<size_t>& readers, int64_t y);

// The values a rewrite must leave as they are: t's outputs, each guard's
// value and what its checks read.
std::unordered_set<int64_t> pinned_values(const Trace& t);

// t's bound symbols with those at the keys of `replace` replaced by their new
// forms and those in `drop` left out; the rest of t (inputs, outputs) as it is.
Trace with_replaced(const Trace& t, const std::unordered_map<size_t, BoundSymbol>& replace,
                    const std::unordered_set<size_t>& drop);

// The ids of the values made inside b's decomposition, at any depth.
void produced_inside(const BoundSymbol& b, std::unordered_set<int64_t>& ids);
// An op whose inner values are read outside it (backward reads the dropout
// mask made inside dropout) is replaced by its parts, so that every value a
// bound symbol reads is made by an earlier one at the same level; other ops
// stay whole.  wrap_prims: a bare prim brought to the top becomes a top-level
// prim bound symbol (prints as one line, as a traced prim does).
std::vector<BoundSymbol> expose(const std::vector<BoundSymbol>& bsyms, const std::unordered_set<int64_t>& used,
                                bool wrap_prims);

}  // namespace volt::jit
