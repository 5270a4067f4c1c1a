// The jit's CUDA executors, added to the built-in list when a GPU is present.
//
//   nvrtc:  each fused elementwise region of CUDA prims becomes one kernel.
//           Its body is exactly what cpu-fusion generates (jit/fusion.cpp,
//           VOLT_KERNEL/VOLT_LOOP), behind the CUDA prelude of
//           tensor/cuda/nvrtc.h, compiled by NVRTC for the GPU's architecture
//           and cached in memory and on disk.  Regions that differ only in
//           the names of their values (the three 784-wide layers) share one
//           compiled kernel.  Traces show them as nvrtcFusionN.
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

// The source NVRTC compiles for one fusion: the CUDA prelude and the body.
std::string cuda_source(const std::string& body);
// The generated body bakes each draw's place in the program's counters
// ("rng_offset + 6272ULL"); the three dropout layers differ only there.  The
// smallest becomes `base`, added to the offset at launch, so those regions
// share one kernel.
std::string relative_offsets(const std::string& body, unsigned long long* base);
// A fusion's body with its value names and its own name replaced by
// canonical ones: two regions with equal keys compute the same thing.
std::string canonical_key(const std::string& body);

// How many distinct kernels nvrtc compiled or loaded, and how many fusions reused one.
struct NvrtcStats {
  int64_t kernels = 0;
  int64_t shared = 0;
};
NvrtcStats nvrtc_stats();

}  // namespace volt::jit::cuda
