// Fusion: maximal runs of elementwise prims over one shape become one
// generated kernel.  The kernel body is plain C++ that names values as the
// trace does (`float t2 = (t1 ? t0 : 0.0f);`), so a printed trace and its
// kernel read side by side; the host C++ compiler builds it (cpu-fusion), and
// the same body is meant for NVRTC on a GPU.
#pragma once
#include <string>
#include <vector>

#include "jit/trace.h"

namespace volt::jit {

using KernelFn = void (*)(long long n, void* const* args, unsigned long long rng_seed,
                          unsigned long long rng_offset);

struct FusedKernel {
  std::string name;    // cpuFusion0
  std::string source;  // the kernel's C++ text
  KernelFn fn = nullptr;
};

// Groups elementwise prims into fusion bound symbols named prefix0, prefix1, ...
// and generates each one's source.
Trace fusion_pass(const Trace& t, const std::string& prefix = "cpuFusion");
// Compiles every fusion of the trace with the host compiler into one shared
// library (cached in memory and under ~/.cache/volt/kernels).  Returns false,
// after one warning, if no compiler is usable: the fusions then run prim by prim.
bool compile_fusions(Trace& t);
// Marks, after each bound symbol, the values used for the last time there.
Trace del_last_used_pass(const Trace& t);

}  // namespace volt::jit
