// The jit's CUDA executors, added to the built-in list when a GPU is present.
//
//   nvrtc:  each fused elementwise region of CUDA prims becomes one kernel:
//           the function jit/codegen.h generates for both devices, behind
//           its CUDA prelude, compiled by NVRTC for the GPU's architecture
//           and cached in memory and on disk.  Regions with equal keys (the
//           three 784-wide layers) share one compiled kernel; kernel_stats()
//           counts them.  Traces show them as nvrtcFusionN.
//   cublas: matmul and linear on CUDA tensors (forward and, after the grad
//           pass, their gradients), shown as cublas_matmul / cublas_linear.
//
//   auto jm = volt::jit::jit(net);   // net on cuda:0
//   jm(x);                           // trace: (t1, t7) = nvrtcFusion0(t0) ...
#pragma once
#include <string>

#include <volt/jit/executor.h>

namespace volt::jit::cuda {

FusionExecutor& nvrtc_executor();
OperatorExecutor& cublas_executor();

}  // namespace volt::jit::cuda
