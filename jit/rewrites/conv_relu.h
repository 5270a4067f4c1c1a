// A ReLU after a convolution, in the convolution's store.
//
// relu(convolution(x, w, b)) becomes one convolution prim with its relu flag
// set (the CPU and CUDA kernels apply bias and ReLU to each GEMM tile as they
// store it), when nothing else reads the convolution's own output:
//
//   t0 = prims.convolution(x, w, b, kernel_size=(3, 3), ...)
//   t1 = volt.relu(t0)                   ->   t1 = prims.convolution(x, w, b, ..., relu=True)
//
// A ReLU already taken apart for its gradient (a traced backward, the lazy
// device's graph) reads as its mask and its select, and the backward reads the
// mask; the mask is then taken from the fused output, whose sign is the
// convolution's where it is positive:
//
//   t1 = prims.gt(t0, 0.0)                    t2 = prims.convolution(x, w, b, ..., relu=True)
//   t2 = prims.where(t1, t0, 0.0)        ->   t1 = prims.gt(t2, 0.0)
//
// Before the grad pass, the fused prim's VJP (autograd/vjp.cpp) reads the
// same mask from the output it is given: the forward is not run again.
#pragma once
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

// Appends the rewritten form of traces.back() to `traces`, where there is a
// pair to fuse (else leaves the list as it is).
void conv_relu_pass(std::vector<Trace>& traces);

}  // namespace volt::jit
