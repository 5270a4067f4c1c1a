#include <volt/jit/fusion.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/kernel_cache.h>
#include <volt/jit/passes.h>

namespace volt::jit {

namespace {

const ProxyNames& names_of(const Trace& t) {
  VOLT_CHECK(t.names, t.name, "the fusion pass needs the trace's names table (Trace::names)");
  return *t.names;
}

}  // namespace

// ---------------------------------------------------------------- cpu-fusion

bool row_fusion_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("VOLT_JIT_ROW_FUSION");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

bool fusible_prim(const BoundSymbol& p) {
  if (p.call.op == OpId::custom) return false;
  return is_elementwise(p.call.op) || (row_fusion_enabled() && (is_row_reduction(p) || p.call.op == OpId::expand));
}

bool CpuFusionExecutor::can_fuse(const BoundSymbol& p) const {
  if (!fusible_prim(p)) return false;
  for (const Tensor& o : p.outputs)
    if (!o.device().is_cpu()) return false;
  for (const Value& v : p.call.args)
    if (v.is_tensor && v.tensor.defined() && !v.tensor.device().is_cpu()) return false;
  return true;
}

namespace {

std::vector<RegionRunner>& region_runners() {
  static auto* r = new std::vector<RegionRunner>;  // filled at start-up, read after
  return *r;
}

}  // namespace

void register_region_runner(RegionRunner runner) { region_runners().push_back(runner); }

bool CpuFusionExecutor::compiled(const BoundSymbol& f) const {
  if (f.kernel) return f.kernel->fn != nullptr;
  for (const RegionRunner& r : region_runners())
    if (r.takes(f)) return true;
  return false;
}

std::vector<Tensor> CpuFusionExecutor::run_fusion(const BoundSymbol& f, const std::vector<Tensor>& inputs,
                                                  const PhiloxState& rng) const {
  for (const RegionRunner& r : region_runners())
    if (r.takes(f)) return r.run(f, inputs, rng);
  std::vector<Tensor> keep;
  std::vector<void*> ptrs;
  for (const Tensor& in : inputs) {
    VOLT_CHECK(in.device().is_cpu(), f.fusion_name, "expected CPU tensors, got " << in.meta_str());
    keep.push_back(in.is_contiguous() ? in : in.contiguous());
    ptrs.push_back(keep.back().raw_data());
  }
  std::vector<Tensor> outs;
  for (const Tensor& o : f.outputs) {
    outs.push_back(Tensor::empty(o.sizes(), o.dtype(), o.device()));
    ptrs.push_back(outs.back().raw_data());
  }
  run_host_kernel(*f.kernel, f.kernel->extent, ptrs.data(), rng.seed, rng.offset + f.kernel->rng_base);
  return outs;
}

FusionExecutor& cpu_fusion_executor() {
  static CpuFusionExecutor e;
  return e;
}

// ---------------------------------------------------------------- the fusion pass

namespace {

struct Group {
  size_t start;
  const FusionExecutor* fu;
  Shape shape;
  bool rows = false;
  std::vector<size_t> members;
  std::unordered_set<int64_t> made;
};

// Each fusible prim joins the latest group of its executor and shape whose
// start all its inputs are ready by (made before the group, or inside it);
// else it starts a group.  So a prim separated from its group by an
// unrelated op (a matmul, say) still lands in the same kernel: one pass over
// memory instead of two (a horizontal merge).  A reduction over the
// innermost dim makes its group a row group of its input's shape
// (jit/codegen_rows.cpp), which then also takes the prims of one value per
// row and the expands of them back to the full shape.  An expand no one
// claimed (it is a view) joins a row group that reads it, else stays a view.
std::vector<Group> form_groups(std::vector<BoundSymbol>& bsyms, std::vector<int>& group_of) {
  auto fuser = [](const BoundSymbol& b) { return b.executor ? b.executor->fusion() : nullptr; };
  std::unordered_map<int64_t, size_t> producer;  // value id -> index of the bound symbol making it
  for (size_t i = 0; i < bsyms.size(); ++i)
    for (const Tensor& o : bsyms[i].outputs) producer[id_of(o)] = i;
  // A row group takes bf16/f16 prims too (an autocast's convert of a
  // LayerNorm's output to bf16, or from bf16 before a softmax): the row kernel
  // loads, rounds and stores them as the elementwise one does (its reductions
  // read f32 or f64 only: is_row_reduction).
  auto fits = [&](const Group& G, const BoundSymbol& b) {
    const Shape& out = b.outputs[0].sizes();
    if (is_row_reduction(b)) return G.shape == b.call.args[0].tensor.sizes();
    if (b.call.op == OpId::expand) return G.rows && out == G.shape;
    if (out == G.shape) return true;
    if (!G.rows) return false;
    Shape row = G.shape;
    row.back() = 1;
    return out == row;
  };
  std::vector<Group> groups;
  auto find_group = [&](const BoundSymbol& b, const FusionExecutor* fu) {
    for (int g = static_cast<int>(groups.size()) - 1; g >= 0; --g) {
      Group& G = groups[static_cast<size_t>(g)];
      if ((fu ? G.fu != fu : !G.fu->can_fuse(b)) || !fits(G, b)) continue;
      bool ready = true;
      for (const Tensor& in : tensor_args(b)) {
        auto p = producer.find(id_of(in));
        if (p != producer.end() && p->second >= G.start && !G.made.count(id_of(in))) ready = false;
      }
      if (ready) return g;
    }
    return -1;
  };
  for (size_t i = 0; i < bsyms.size(); ++i) {
    const FusionExecutor* fu = fuser(bsyms[i]);
    int chosen = -1;
    const bool unclaimed = !bsyms[i].executor || bsyms[i].executor == &eager_executor();
    if (unclaimed && bsyms[i].call.op == OpId::expand && bsyms[i].subsymbols.size() <= 1) {
      BoundSymbol prim = bsyms[i].subsymbols.empty() ? bsyms[i] : bsyms[i].subsymbols.front();
      chosen = find_group(prim, nullptr);
      if (chosen < 0) continue;
      fu = groups[static_cast<size_t>(chosen)].fu;
      prim.executor = fu;
      bsyms[i] = std::move(prim);
    }
    if (!fu) continue;
    if (chosen < 0) chosen = find_group(bsyms[i], fu);
    if (chosen < 0) {
      const bool red = is_row_reduction(bsyms[i]);
      groups.push_back({i, fu, red ? bsyms[i].call.args[0].tensor.sizes() : bsyms[i].outputs[0].sizes(), false, {}, {}});
      chosen = static_cast<int>(groups.size()) - 1;
    }
    Group& G = groups[static_cast<size_t>(chosen)];
    G.rows = G.rows || is_row_reduction(bsyms[i]);
    G.members.push_back(i);
    for (const Tensor& o : bsyms[i].outputs) G.made.insert(id_of(o));
    group_of[i] = chosen;
  }
  return groups;
}

}  // namespace

Trace fusion_pass(const Trace& t) {
  auto t0 = Clock::now();
  const ProxyNames& names = names_of(t);
  // Elementwise prims no executor claimed yet (a trace that skipped the claim
  // pass) go to cpu-fusion where it can take them.
  std::vector<BoundSymbol> bsyms = t.bsyms;
  for (BoundSymbol& b : bsyms)
    if (!b.executor && b.subsymbols.size() <= 1 && b.call.op != OpId::expand && cpu_fusion_executor().can_fuse(b)) {
      if (!b.subsymbols.empty()) b = b.subsymbols.front();
      b.executor = &cpu_fusion_executor();
    }
  std::vector<int> group_of(bsyms.size(), -1);
  const std::vector<Group> groups = form_groups(bsyms, group_of);
  // A group's outputs: what is used outside it, or returned.
  std::unordered_set<int64_t> outputs;
  for (const Tensor& o : t.outputs) outputs.insert(id_of(o));
  std::vector<std::unordered_set<int64_t>> used_outside(groups.size());
  for (size_t i = 0; i < bsyms.size(); ++i)
    for (const Tensor& in : tensor_args(bsyms[i]))
      for (size_t g = 0; g < groups.size(); ++g)
        if (group_of[i] != static_cast<int>(g) && groups[g].made.count(id_of(in))) used_outside[g].insert(id_of(in));

  Trace r = t;
  r.bsyms.clear();
  std::unordered_map<const FusionExecutor*, int> count;
  for (size_t i = 0; i < bsyms.size(); ++i) {
    if (group_of[i] < 0) {
      r.bsyms.push_back(bsyms[i]);
      continue;
    }
    const size_t g = static_cast<size_t>(group_of[i]);
    const Group& G = groups[g];
    if (G.start != i) continue;  // emitted with its group, at the group's first member
    BoundSymbol f;
    f.kind = BoundSymbol::Kind::Fusion;
    f.executor = G.fu;
    f.fusion_name = G.fu->prefix() + std::to_string(count[G.fu]++);
    f.scope = bsyms[G.members.front()].scope;  // where its first prim came from
    std::unordered_set<int64_t> inside, seen_in;
    for (size_t k : G.members) {
      for (const Tensor& in : tensor_args(bsyms[k]))
        if (!inside.count(id_of(in)) && seen_in.insert(id_of(in)).second) f.fusion_inputs.push_back(in);
      for (const Tensor& o : bsyms[k].outputs) inside.insert(id_of(o));
      BoundSymbol p = bsyms[k];
      p.executor = nullptr;
      f.subsymbols.push_back(std::move(p));
    }
    for (size_t k : G.members)
      for (const Tensor& o : bsyms[k].outputs)
        if (outputs.count(id_of(o)) || used_outside[g].count(id_of(o))) f.outputs.push_back(o);
    f.kernel = generate_kernel(f, names);
    r.bsyms.push_back(std::move(f));
  }
  r.provenance = "Fusion";
  r.millis = ms_since(t0);
  return r;
}

bool compile_fusions(Trace& t) {
  std::vector<const FusionExecutor*> seen;
  bool ok = true;
  for (const BoundSymbol& b : t.bsyms) {
    const FusionExecutor* fu = b.executor ? b.executor->fusion() : nullptr;
    if (!fu || !b.kernel || std::find(seen.begin(), seen.end(), fu) != seen.end()) continue;
    seen.push_back(fu);
    ok = fu->compile(t) && ok;
  }
  return ok;
}

namespace {

// Kernels built so far in this process, by toolchain, cache directory and
// key: a region whose key is here runs the function already built.
struct Built {
  std::mutex mutex;
  std::unordered_map<std::string, KernelFn> by_key;
  KernelStats stats;
};
Built& built() {
  static auto* b = new Built;
  return *b;
}

}  // namespace

KernelStats CpuFusionExecutor::kernel_stats() const {
  std::lock_guard<std::mutex> lock(built().mutex);
  return built().stats;
}

bool CpuFusionExecutor::compile(Trace& t) const {
  // What else decides the library: the cache directory, the compiler, its flags.
  const std::string dir = kernel_cache_dir().string() + "\n" + kernel_cache_key("");
  auto key_of = [&](const BoundSymbol& b) { return dir + b.kernel->key; };
  Built& B = built();
  std::lock_guard<std::mutex> lock(B.mutex);
  // The trace's distinct new kernels go into one library.
  std::vector<const FusedKernel*> fresh;
  std::vector<std::string> symbols;
  std::unordered_map<std::string, size_t> fresh_index;
  for (const BoundSymbol& b : t.bsyms) {
    if (b.executor != this || !b.kernel) continue;
    if (B.by_key.count(key_of(b)) || fresh_index.count(key_of(b))) continue;
    fresh_index[key_of(b)] = fresh.size();
    fresh.push_back(b.kernel.get());
    symbols.push_back(b.kernel->symbol);
  }
  if (!fresh.empty()) {
    std::string error;
    std::vector<void*> fns = load_host_kernels(host_source(fresh), symbols, &error);
    if (fns.empty()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        std::cerr << "volt: warning: the host C++ compiler could not build fused kernels; running them prim by "
                     "prim instead.\n"
                  << error;
      return false;
    }
    for (size_t k = 0; k < fresh.size(); ++k) B.by_key[dir + fresh[k]->key] = reinterpret_cast<KernelFn>(fns[k]);
    B.stats.kernels += static_cast<int64_t>(fresh.size());
  }
  for (BoundSymbol& b : t.bsyms)
    if (b.executor == this && b.kernel && !b.kernel->fn) {
      b.kernel->fn = B.by_key.at(key_of(b));
      if (auto it = fresh_index.find(key_of(b)); it != fresh_index.end() && fresh[it->second] == b.kernel.get()) continue;
      ++B.stats.shared;
    }
  return true;
}

}  // namespace volt::jit
