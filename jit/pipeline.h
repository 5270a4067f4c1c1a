// The compile pipeline both front ends (jit() and the lazy device) run on a
// trace of prims: claim (executors take bound symbols) -> fuse (elementwise
// runs become fusion regions with generated kernels) -> GEMM epilogues (a CPU
// matmul's or linear's one reader runs in its store: jit/rewrites/gemm_epilogue.h) ->
// compile (the fusion executors build them) -> delete-last-used -> ready for
// the interpreter.
// Each step appends its trace to the list, and every trace is checked
// (jit/check.h).
#pragma once
#include <vector>

#include <volt/jit/executor.h>
#include <volt/jit/trace.h>

namespace volt::jit {

void compile_pipeline(std::vector<Trace>& traces, ProxyNames& names, const std::vector<Executor*>& executors);

}  // namespace volt::jit
