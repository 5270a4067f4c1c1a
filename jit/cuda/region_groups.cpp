// "nvrtc region groups": adjacent elementwise regions that share no value
// they make, launched as one kernel (horizontal fusion).
//
// The fusion pass makes one region per extent: a compiled step's optimizer
// update is a region per parameter shape (the three 784 x 784 weights in one,
// their biases in another, the 28 x 784 weight in a third...), adjacent in the
// trace and independent of one another.  Each is a launch, a node of the
// step's CUDA graph, for a few microseconds of work at batch 8.  This pass
// joins such a run into one region whose kernel calls each part's kernel (the
// code generator's own, now a device function) over its own extent, all
// parts over the same grid, one after the other in every thread:
//
//   (t140, ..., t241) = nvrtcFusion16_19(t124, s10, s11, t137, t136, _0_weight, ...)
//
// extern "C" __global__ void volt_group_<hash>(long long n, volt_args args, ...) {
//   { volt_args a = {}; a.p[0] = args.p[0]; ...; volt_fused_743e...(614656LL, a, ...); }
//   { volt_args a = {}; ...; volt_fused_82c4...(2352LL, a, ...); }
// }
//
// A part writes only its own outputs and reads only values made before the
// group, so running the parts in one launch computes what the separate
// launches did, element for element.  A group takes at most the argument
// table's slots (codegen.h's kMaxKernelArgs, the last one the Philox word); a
// longer run becomes several groups.  Regions with draws or row reductions,
// and 16-bit ones, stay as they are.
#include <volt/jit/cuda/region_groups.h>

#include <cstdio>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/codegen.h>
#include <volt/jit/kernel_cache.h>
#include <volt/jit/cuda/executors.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/nvrtc.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

constexpr const char* kGroupPrefix = "volt_group_";

// An nvrtc region whose kernel can be a part of a group.
bool groupable(const BoundSymbol& b) {
  if (!b.is_fusion() || b.executor != &nvrtc_executor() || !b.kernel || !b.kernel->device_fn ||
      b.kernel->row_len > 0 || b.kernel->symbol.rfind(kGroupPrefix, 0) == 0 || b.outputs.empty())
    return false;
  for (const BoundSymbol& p : b.subsymbols)
    if (p.call.op == OpId::uniform) return false;
  for (const Tensor& t : b.fusion_inputs)
    if (is_half(t.dtype()) || !t.device().is_cuda()) return false;
  for (const Tensor& t : b.outputs)
    if (is_half(t.dtype())) return false;
  return true;
}

}  // namespace

FusedKernel group_kernel(const std::vector<GroupPart>& parts, const std::string& name) {
  FusedKernel k;
  std::string key = "group", calls, readable, bodies;
  std::set<std::string> bodies_seen;
  for (const GroupPart& part : parts) {
    const FusedKernel& pk = *part.kernel;
    VOLT_CHECK(pk.row_len == 0 && !pk.body.empty(), name, "a group takes elementwise regions with kernels");
    if (bodies_seen.insert(pk.symbol).second) bodies += pk.body + "\n";
    k.extent = std::max(k.extent, pk.extent);
    std::string call = "  { volt_args a = {};";
    for (size_t j = 0; j < part.slots.size(); ++j)
      call += " a.p[" + std::to_string(j) + "] = args.p[" + std::to_string(part.slots[j]) + "];";
    call += " a.p[VOLT_MAX_ARGS - 1] = args.p[VOLT_MAX_ARGS - 1]; " + pk.symbol + "(" + std::to_string(pk.extent) +
            "LL, a, volt_rng_seed, volt_rng_offset); }\n";
    calls += call;
    key += "|" + pk.key + call;
    readable += pk.source + "\n";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_string(key)));
  k.name = name;
  k.key = key;
  k.symbol = kGroupPrefix + std::string(hex);
  // The parts' kernels become device functions the group's kernel calls.
  k.body = "#undef VOLT_KERNEL\n"
           "#define VOLT_KERNEL(name) static __device__ __forceinline__ void name(long long n, volt_args args, \\\n"
           "    unsigned long long volt_rng_seed, unsigned long long volt_rng_offset)\n" +
           bodies + "extern \"C\" __global__ void " + k.symbol +
           "(long long n, volt_args args, unsigned long long volt_rng_seed, unsigned long long volt_rng_offset) {\n"
           "  (void)n;\n" + calls + "}\n";
  k.source = "// " + name + ": " + std::to_string(parts.size()) + " regions in one launch (compiled as " + k.symbol +
             ")\n" + readable;
  return k;
}

namespace {

// The group of `parts`: its region (inputs deduplicated, outputs in order)
// and its kernel, compiled for the parts' device.
BoundSymbol make_group(const std::vector<const BoundSymbol*>& parts) {
  BoundSymbol g;
  g.kind = BoundSymbol::Kind::Fusion;
  g.executor = parts.front()->executor;
  g.scope = parts.front()->scope;
  std::string last = parts.back()->fusion_name;
  const size_t digits = last.find_last_not_of("0123456789");
  g.fusion_name = parts.front()->fusion_name + "_" + last.substr(digits == std::string::npos ? 0 : digits + 1);
  std::unordered_map<int64_t, int> slot;  // value -> its place in the group's table
  for (const BoundSymbol* p : parts)
    for (const Tensor& in : p->fusion_inputs)
      if (slot.emplace(id_of(in), static_cast<int>(g.fusion_inputs.size())).second) g.fusion_inputs.push_back(in);
  const int num_inputs = static_cast<int>(g.fusion_inputs.size());
  for (const BoundSymbol* p : parts)
    for (const Tensor& o : p->outputs) {
      slot[id_of(o)] = num_inputs + static_cast<int>(g.outputs.size());
      g.outputs.push_back(o);
    }
  std::vector<GroupPart> gp;
  for (const BoundSymbol* p : parts) {
    GroupPart part{p->kernel.get(), {}};
    for (const Tensor& in : p->fusion_inputs) part.slots.push_back(slot.at(id_of(in)));
    for (const Tensor& o : p->outputs) part.slots.push_back(slot.at(id_of(o)));
    gp.push_back(std::move(part));
  }
  auto k = std::make_shared<FusedKernel>(group_kernel(gp, g.fusion_name));
  k->args = static_cast<long long>(g.fusion_inputs.size() + g.outputs.size());
  const int dev = g.outputs.front().device().index;
  k->device_fn = vc::get_kernel(cuda_prelude() + k->body, k->symbol, dev);
  g.kernel = k;
  for (const BoundSymbol* p : parts)
    g.subsymbols.insert(g.subsymbols.end(), p->subsymbols.begin(), p->subsymbols.end());
  return g;
}

void region_groups_pass(std::vector<Trace>& traces) {
  auto t0 = Clock::now();
  const Trace& t = traces.back();
  Trace r = t;
  r.bsyms.clear();
  bool changed = false;
  std::vector<const BoundSymbol*> run;
  std::unordered_set<int64_t> made, args, state;  // by the run so far; the trace's inputs it reads
  std::unordered_set<int64_t> inputs;
  for (const Tensor& in : t.inputs) inputs.insert(id_of(in));
  auto flush = [&] {
    if (run.size() > 1) {
      r.bsyms.push_back(make_group(run));
      changed = true;
    } else if (run.size() == 1) {
      r.bsyms.push_back(*run.front());
    }
    run.clear();
    made.clear();
    args.clear();
    state.clear();
  };
  for (const BoundSymbol& b : t.bsyms) {
    if (!groupable(b)) {
      flush();
      r.bsyms.push_back(b);
      continue;
    }
    bool independent = !run.empty() && b.outputs.front().device() == run.front()->outputs.front().device();
    size_t more = 0;
    // A trace input read by two parts could be one part's old value that
    // the step writes over (donation): other blocks may still be in the part
    // reading it, so such regions stay apart.
    for (const Tensor& in : b.fusion_inputs) {
      independent = independent && !made.count(id_of(in)) && !state.count(id_of(in));
      more += !args.count(id_of(in));
    }
    if (!independent || args.size() + more + b.outputs.size() > static_cast<size_t>(kMaxKernelArgs - 1)) flush();
    run.push_back(&b);
    for (const Tensor& in : b.fusion_inputs) {
      args.insert(id_of(in));
      if (inputs.count(id_of(in))) state.insert(id_of(in));
    }
    for (const Tensor& o : b.outputs) {
      made.insert(id_of(o));
      args.insert(id_of(o));
    }
  }
  flush();
  if (!changed) return;
  r.provenance = "nvrtc region groups";
  r.millis = ms_since(t0);
  traces.push_back(std::move(r));
}

// After the regions' kernels are compiled (the parts' bodies exist).  Opt-in
// (JitOptions.pipeline.with = {"nvrtc region groups"}): on a real H200 the
// compiled MLP step with the groups wrote out of bounds (compute-sanitizer
// memcheck: invalid global writes in a volt_group_ kernel) and trained to NaN,
// where the simulated GPU, whose blocks run one at a time, computed every step
// right; without the pass the same step was clean (bench/gpu/, 2026-11-29).
const bool g_region_groups_registered = [] {
  register_pass({"nvrtc region groups", PassStage::Schedule, /*rewrite=*/true, /*opt_in=*/true, region_groups_pass});
  return true;
}();

}  // namespace

bool is_region_group(const BoundSymbol& b) {
  return b.is_fusion() && b.kernel && b.kernel->symbol.rfind(kGroupPrefix, 0) == 0;
}

}  // namespace volt::jit::cuda
