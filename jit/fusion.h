// Fusion: maximal runs of elementwise prims over one shape become one
// generated kernel.  The kernel body is plain C++ that names values as the
// trace does (`float t2 = (t1 ? t0 : 0.0f);`), so a printed trace and its
// kernel read side by side; the host C++ compiler builds it (cpu-fusion), and
// the same body is meant for NVRTC on a GPU.
#pragma once
#include <string>
#include <vector>

#include <volt/jit/executor.h>
#include <volt/jit/trace.h>

namespace volt::jit {

using KernelFn = void (*)(long long n, void* const* args, unsigned long long rng_seed,
                          unsigned long long rng_offset);

struct FusedKernel {
  std::string name;    // cpuFusion0
  std::string source;  // the kernel's C++ text
  KernelFn fn = nullptr;
};

// cpu-fusion: kernels compiled by the host C++ compiler, all fusions of a
// trace into one shared library (cached in memory and under
// ~/.cache/volt/kernels, keyed by source, compiler and flags).  If no compiler
// is usable, one warning, and the fusions run prim by prim.
class CpuFusionExecutor final : public FusionExecutor {
 public:
  CpuFusionExecutor() : FusionExecutor("cpu-fusion", VOLT_VERSION) {}
  bool can_fuse(const BoundSymbol& prim) const override;
  std::string prefix() const override { return "cpuFusion"; }
  void generate(BoundSymbol& fusion, const ProxyNames& names) const override;
  bool compile(Trace& t) const override;
  std::vector<Tensor> run(const BoundSymbol& fusion, const std::vector<Tensor>& inputs,
                          const PhiloxState& rng) const override;
};

// Groups consecutive prims claimed by the same fusion executor, over one
// shape, into fusion bound symbols named prefix0, prefix1, ... and generates
// each one's kernel source.  Elementwise CPU prims nobody claimed (a trace
// that skipped the claim pass) go to cpu-fusion.
Trace fusion_pass(const Trace& t);
// Asks each fusion executor in the trace to build its kernels; false if one could not.
bool compile_fusions(Trace& t);
// Marks, after each bound symbol, the values used for the last time there.
Trace del_last_used_pass(const Trace& t);

}  // namespace volt::jit
