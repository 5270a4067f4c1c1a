// Fusion: maximal runs of elementwise prims over one shape become one fusion
// region (a bound symbol `cpuFusion0(inputs) -> outputs` holding its prims),
// and each region gets its kernel from the code generator (jit/codegen.h).
// cpu-fusion builds those kernels with the host C++ compiler; regions with
// equal keys share one compiled function.
#pragma once
#include <string>
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/executor.h>
#include <volt/jit/trace.h>

namespace volt::jit {

// cpu-fusion: kernels compiled by the host C++ compiler, the new ones of a
// trace into one shared library (kept in memory by key, and on disk under
// ~/.cache/volt/kernels: jit/kernel_cache.h).  If no compiler is usable, one
// warning, and the fusions run prim by prim.
class CpuFusionExecutor final : public FusionExecutor {
 public:
  CpuFusionExecutor() : FusionExecutor("cpu-fusion", VOLT_VERSION) {}
  bool can_fuse(const BoundSymbol& prim) const override;
  std::string prefix() const override { return "cpuFusion"; }
  bool compile(Trace& t) const override;
  // Its kernel is loaded, or it has none and a runner takes it (below).
  bool compiled(const BoundSymbol& fusion) const override;
  std::vector<Tensor> run_fusion(const BoundSymbol& fusion, const std::vector<Tensor>& inputs,
                                 const PhiloxState& rng) const override;
  KernelStats kernel_stats() const override;
};

// A region some rewrite made that cpu-fusion runs otherwise than as one
// elementwise kernel (jit/rewrites/gemm_epilogue.h: in its product's store;
// jit/rewrites/column_sum.h: a region with no generated kernel at all).
// Registered at start-up by the rewrite; the first runner that takes a region runs it.
struct RegionRunner {
  bool (*takes)(const BoundSymbol& region);
  std::vector<Tensor> (*run)(const BoundSymbol& region, const std::vector<Tensor>& inputs, const PhiloxState& rng);
};
void register_region_runner(RegionRunner runner);

// What a fusion executor can take: elementwise prims, reductions over the
// innermost dim (is_row_reduction) and expands (fused only into a row region).
// VOLT_JIT_ROW_FUSION=0 leaves reductions out: each ends a region, as before
// row regions existed (to compare the two).
bool fusible_prim(const BoundSymbol& prim);
bool row_fusion_enabled();

// Groups consecutive prims claimed by the same fusion executor, over one
// shape, into fusion bound symbols named prefix0, prefix1, ... and generates
// each one's kernel.  Elementwise CPU prims nobody claimed (a trace that
// skipped the claim pass) go to cpu-fusion.
Trace fusion_pass(const Trace& t);
// Asks each fusion executor in the trace to build its kernels; false if one could not.
bool compile_fusions(Trace& t);

}  // namespace volt::jit
