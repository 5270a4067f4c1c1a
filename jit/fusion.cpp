#include <volt/jit/fusion.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/kernel_cache.h>
#include <volt/jit/passes.h>
#include <volt/tensor/identifiers.h>
#include <volt/philox_source.h>

namespace volt::jit {

namespace {

const ProxyNames& names_of(const Trace& t) {
  for (const Tensor& x : t.inputs)
    if (x.impl()->proxy_owner) return *static_cast<const ProxyNames*>(x.impl()->proxy_owner);
  for (const Tensor& x : t.outputs)
    if (x.impl()->proxy_owner) return *static_cast<const ProxyNames*>(x.impl()->proxy_owner);
  throw Error("jit: a trace without proxies");
}

std::string literal(const Scalar& s, DType t) {
  std::string c = dtype_c_type(t);
  if (t == DType::b8) return s.value != 0 ? "true" : "false";
  if (is_floating(t)) return "((" + c + ")" + python_float_repr(s.value) + ")";
  return "((" + c + ")" + std::to_string(static_cast<long long>(s.value)) + "LL)";
}

// Index of element i of the group's shape in a (broadcast) input of shape `in`.
std::string index_expr(const Shape& in, const Shape& out) {
  if (in == out) return "i";
  if (shape_numel(in) == 1) return "0";
  Shape padded(out.size() - in.size(), 1);
  padded.insert(padded.end(), in.begin(), in.end());
  Shape ost = contiguous_strides(out), ist = contiguous_strides(padded);
  std::string r;
  for (size_t d = 0; d < out.size(); ++d) {
    if (padded[d] == 1) continue;
    if (!r.empty()) r += " + ";
    r += "((i / " + std::to_string(ost[d]) + "LL) % " + std::to_string(out[d]) + "LL) * " +
         std::to_string(ist[d]) + "LL";
  }
  return r.empty() ? "0" : r;
}

std::string generate_body(const BoundSymbol& f, const ProxyNames& names, const Shape& shape) {
  std::ostringstream os;
  os << "// " << f.fusion_name << ": " << shape_str(shape) << "\n";
  os << "VOLT_KERNEL(" << f.fusion_name << ") {\n";
  size_t k = 0;
  for (const Tensor& in : f.fusion_inputs)
    os << "  const " << dtype_c_type(in.dtype()) << "* in_" << names.name(in) << " = (const "
       << dtype_c_type(in.dtype()) << "*)args[" << k++ << "];\n";
  for (const Tensor& o : f.outputs)
    os << "  " << dtype_c_type(o.dtype()) << "* out_" << names.name(o) << " = (" << dtype_c_type(o.dtype())
       << "*)args[" << k++ << "];\n";
  os << "  VOLT_LOOP(i, n) {\n";
  for (const Tensor& in : f.fusion_inputs)
    os << "    const " << dtype_c_type(in.dtype()) << " " << names.name(in) << " = in_" << names.name(in)
       << "[" << index_expr(in.sizes(), shape) << "];\n";
  for (const BoundSymbol& p : f.subsymbols) {
    const OpCall& c = p.call;
    const Tensor& out = p.outputs[0];
    std::string rt = dtype_c_type(out.dtype());
    std::string expr;
    if (c.op == OpId::uniform) {
      bool f32 = c.attrs.dtype == DType::f32;
      expr = std::string(f32 ? "volt_uniform_range_f32" : "volt_uniform_range_f64") + "(rng_seed, rng_offset + " +
             std::to_string(c.attrs.offset) + "ULL, (unsigned long long)i, " + literal(c.attrs.a, c.attrs.dtype) +
             ", " + literal(c.attrs.b, c.attrs.dtype) + ")";
    } else {
      OpKind kind = op_info(c.op).kind;
      DType cd = kind == OpKind::Unary && c.op != OpId::logical_not ? out.dtype() : compute_dtype(c);
      std::vector<std::string> ops;
      for (size_t i = 0; i < c.args.size(); ++i) {
        DType want = cd;
        if (kind == OpKind::Ternary && i == 0) want = DType::b8;
        if (kind == OpKind::Convert) want = c.args[0].tensor.dtype();
        const Value& v = c.args[i];
        ops.push_back(v.is_tensor ? "((" + std::string(dtype_c_type(want)) + ")" + names.name(v.tensor) + ")"
                                  : literal(v.scalar, want));
      }
      expr = fill_op_expr(op_info(c.op).expr, ops, rt);
    }
    os << "    const " << rt << " " << names.name(out) << " = (" << rt << ")" << expr << ";\n";
  }
  for (const Tensor& o : f.outputs) os << "    out_" << names.name(o) << "[i] = " << names.name(o) << ";\n";
  os << "  }\n}\n";
  return os.str();
}

// Host-side definitions of the two macros; a GPU build defines them for CUDA.
const char* kHostPrelude = R"volt(#include <cmath>
using std::exp; using std::log; using std::sqrt; using std::tanh; using std::pow;
#define VOLT_PASTE2(a, b) a##b
#define VOLT_PASTE(a, b) VOLT_PASTE2(a, b)
#define VOLT_KERNEL(name) extern "C" void VOLT_PASTE(name, VOLT_KEY)(long long n, void* const* args, \
    unsigned long long rng_seed, unsigned long long rng_offset)
#define VOLT_LOOP(i, n) (void)rng_seed; (void)rng_offset; \
    _Pragma("omp parallel for simd if (n > 65536)") for (long long i = 0; i < n; ++i)
)volt";

}  // namespace

// ---------------------------------------------------------------- cpu-fusion

bool CpuFusionExecutor::can_fuse(const BoundSymbol& p) const {
  if (p.call.op == OpId::custom || !is_elementwise(p.call.op)) return false;
  for (const Tensor& o : p.outputs)
    if (!o.device().is_cpu()) return false;
  for (const Value& v : p.call.args)
    if (v.is_tensor && v.tensor.defined() && !v.tensor.device().is_cpu()) return false;
  return true;
}

void CpuFusionExecutor::generate(BoundSymbol& f, const ProxyNames& names) const {
  f.kernel = std::make_shared<FusedKernel>();
  f.kernel->name = f.fusion_name;
  f.kernel->source = generate_body(f, names, f.subsymbols.front().outputs.front().sizes());
}

std::vector<Tensor> CpuFusionExecutor::run(const BoundSymbol& f, const std::vector<Tensor>& inputs,
                                           const PhiloxState& rng) const {
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
  long long n = static_cast<long long>(f.subsymbols.front().outputs.front().numel());
  f.kernel->fn(n, ptrs.data(), rng.seed, rng.offset);
  return outs;
}

FusionExecutor& cpu_fusion_executor() {
  static CpuFusionExecutor e;
  return e;
}

// ---------------------------------------------------------------- the fusion pass

Trace fusion_pass(const Trace& t) {
  auto t0 = Clock::now();
  const ProxyNames& names = names_of(t);
  // Elementwise prims no executor claimed yet (a trace that skipped the claim
  // pass) go to cpu-fusion where it can take them.
  std::vector<BoundSymbol> bsyms = t.bsyms;
  for (BoundSymbol& b : bsyms)
    if (!b.executor && b.subsymbols.size() <= 1 && cpu_fusion_executor().can_fuse(b)) {
      if (!b.subsymbols.empty()) b = b.subsymbols.front();
      b.executor = &cpu_fusion_executor();
    }
  auto fuser = [](const BoundSymbol& b) { return dynamic_cast<const FusionExecutor*>(b.executor); };
  std::unordered_map<int64_t, size_t> producer;  // value id -> index of the bound symbol making it
  for (size_t i = 0; i < bsyms.size(); ++i)
    for (const Tensor& o : bsyms[i].outputs) producer[id_of(o)] = i;

  // Each fusible prim joins the latest group of its executor and shape whose
  // start all its inputs are ready by (made before the group, or inside it);
  // else it starts a group.  So a prim separated from its group by an
  // unrelated op (a matmul, say) still lands in the same kernel: one pass over
  // memory instead of two (a horizontal merge).
  struct Group {
    size_t start;
    const FusionExecutor* fu;
    Shape shape;
    std::vector<size_t> members;
    std::unordered_set<int64_t> made;
  };
  std::vector<Group> groups;
  std::vector<int> group_of(bsyms.size(), -1);
  for (size_t i = 0; i < bsyms.size(); ++i) {
    const FusionExecutor* fu = fuser(bsyms[i]);
    if (!fu) continue;
    const Shape& shape = bsyms[i].outputs[0].sizes();
    int chosen = -1;
    for (int g = static_cast<int>(groups.size()) - 1; g >= 0 && chosen < 0; --g) {
      Group& G = groups[static_cast<size_t>(g)];
      if (G.fu != fu || G.shape != shape) continue;
      bool ready = true;
      for (const Tensor& in : tensor_args(bsyms[i])) {
        auto p = producer.find(id_of(in));
        if (p != producer.end() && p->second >= G.start && !G.made.count(id_of(in))) ready = false;
      }
      if (ready) chosen = g;
    }
    if (chosen < 0) {
      groups.push_back({i, fu, shape, {}, {}});
      chosen = static_cast<int>(groups.size()) - 1;
    }
    Group& G = groups[static_cast<size_t>(chosen)];
    G.members.push_back(i);
    for (const Tensor& o : bsyms[i].outputs) G.made.insert(id_of(o));
    group_of[i] = chosen;
  }
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
    f.executor = G.fu;
    f.fusion_name = G.fu->prefix() + std::to_string(count[G.fu]++);
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
    G.fu->generate(f, names);
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
    auto* fu = dynamic_cast<const FusionExecutor*>(b.executor);
    if (!fu || !b.kernel || std::find(seen.begin(), seen.end(), fu) != seen.end()) continue;
    seen.push_back(fu);
    ok = fu->compile(t) && ok;
  }
  return ok;
}

bool CpuFusionExecutor::compile(Trace& t) const {
  std::string body;
  std::vector<std::string> names;
  for (const BoundSymbol& b : t.bsyms)
    if (b.kernel && b.executor == this) {
      body += b.kernel->source + "\n";
      names.push_back(b.kernel->name);
    }
  if (body.empty()) return true;
  const std::string source = std::string(kHostPrelude) + "#define VOLT_HD\n" + kPhiloxSource + "\n" + body;
  std::string error;
  std::vector<void*> fns = load_host_kernels(source, names, &error);
  if (fns.empty()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::cerr << "volt: warning: the host C++ compiler could not build fused kernels; running them prim by "
                   "prim instead.\n"
                << error;
    return false;
  }
  size_t k = 0;
  for (BoundSymbol& b : t.bsyms)
    if (b.kernel && b.executor == this) b.kernel->fn = reinterpret_cast<KernelFn>(fns[k++]);
  return true;
}

Trace del_last_used_pass(const Trace& t) {
  auto t0 = Clock::now();
  Trace r = t;
  std::unordered_set<int64_t> keep, seen;
  for (const Tensor& o : t.outputs) keep.insert(id_of(o));
  // An augmented forward returns its inputs too (flat_args).
  if (t.kind == Trace::Kind::AugmentedForward)
    for (const Tensor& i : t.inputs) keep.insert(id_of(i));
  // Walking backwards, the first time a value is met is its last use.
  for (auto it = r.bsyms.rbegin(); it != r.bsyms.rend(); ++it) {
    it->del_after.clear();
    const auto& args_src = it->fusion_name.empty() ? std::vector<Tensor>{} : it->fusion_inputs;
    std::vector<Tensor> used = args_src;
    if (it->fusion_name.empty())
      for (const Value& v : it->call.args)
        if (v.is_tensor && v.tensor.defined()) used.push_back(v.tensor);
    for (const Tensor& u : used)
      if (!keep.count(id_of(u)) && seen.insert(id_of(u)).second) it->del_after.push_back(u);
  }
  r.provenance = "Delete Last Used";
  r.millis = ms_since(t0);
  return r;
}

}  // namespace volt::jit
