#include <volt/jit/passes.h>

#include <chrono>
#include <map>
#include <sstream>
#include <utility>
#include <unordered_map>
#include <unordered_set>

namespace volt::jit {

namespace {

bool draws_random(const BoundSymbol& b) {
  if (op_info(b.call.op).kind == OpKind::Random) return true;
  for (const BoundSymbol& s : b.subsymbols)
    if (draws_random(s)) return true;
  return false;
}

// A structural key for CSE: op, argument ids or scalar values, attributes.
std::string cse_key(const OpCall& c) {
  std::ostringstream os;
  os << static_cast<int>(c.op) << "(";
  for (const Value& v : c.args) {
    if (v.is_tensor) os << "#" << (v.tensor.defined() ? id_of(v.tensor) : -1) << ",";
    else os << static_cast<int>(v.scalar.kind) << ":" << python_float_repr(v.scalar.value) << ",";
  }
  const Attrs& a = c.attrs;
  os << ")[";
  for (int64_t i : a.ints) os << i << ",";
  os << "]" << python_float_repr(a.a) << "," << python_float_repr(a.b) << "," << static_cast<int>(a.dtype)
     << "," << a.device.str() << "," << a.flag << "," << a.custom;
  return os.str();
}

}  // namespace

std::unordered_set<int64_t> pinned_values(const Trace& t) {
  std::unordered_set<int64_t> pinned;
  for (const Tensor& o : t.outputs) pinned.insert(id_of(o));
  for (const Guard& g : t.guards) {
    pinned.insert(id_of(g.value));
    for (const BoundSymbol& b : g.bsyms)
      for (const Tensor& a : tensor_args(b)) pinned.insert(id_of(a));
  }
  return pinned;
}

Trace with_replaced(const Trace& t, const std::unordered_map<size_t, BoundSymbol>& replace,
                    const std::unordered_set<size_t>& drop) {
  Trace r = t;
  r.bsyms.clear();
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    if (drop.count(i)) continue;
    auto it = replace.find(i);
    r.bsyms.push_back(it != replace.end() ? it->second : t.bsyms[i]);
  }
  return r;
}

Trace dce_cse_pass(const Trace& t) {
  auto t0 = Clock::now();
  Trace r = t;
  // CSE: forward walk, redirecting uses of a repeated computation to the first one.
  std::unordered_map<int64_t, Tensor> replace;
  std::map<std::string, std::vector<Tensor>> seen;
  std::vector<BoundSymbol> kept;
  for (const BoundSymbol& orig : t.bsyms) {
    std::vector<BoundSymbol> one{orig};
    substitute(one, replace);
    BoundSymbol& b = one[0];
    // Random draws are never merged: two draws are two different tensors.
    if (!draws_random(b)) {
      std::string key = cse_key(b.call);
      if (auto it = seen.find(key); it != seen.end()) {
        for (size_t i = 0; i < b.outputs.size(); ++i) replace[id_of(b.outputs[i])] = it->second[i];
        continue;
      }
      seen[key] = b.outputs;
    }
    kept.push_back(std::move(b));
  }
  for (Tensor& o : r.outputs)
    if (auto it = replace.find(id_of(o)); it != replace.end()) o = it->second;
  // DCE: backward walk keeping what the outputs need.  Dropping an unused
  // random draw is safe: every draw's counters are fixed in the trace.
  std::unordered_set<int64_t> live;
  for (const Tensor& o : r.outputs) live.insert(id_of(o));
  std::vector<BoundSymbol> out;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    bool needed = false;
    for (const Tensor& o : it->outputs) needed |= live.count(id_of(o)) > 0;
    if (!needed) continue;
    for (const Tensor& a : tensor_args(*it)) live.insert(id_of(a));
    out.push_back(*it);
  }
  r.bsyms.assign(out.rbegin(), out.rend());
  r.provenance = "Dead code and common subexpression elimination";
  r.millis = ms_since(t0);
  return r;
}

void produced_inside(const BoundSymbol& b, std::unordered_set<int64_t>& ids) {
  for (const BoundSymbol& s : b.subsymbols) {
    for (const Tensor& o : s.outputs) ids.insert(id_of(o));
    produced_inside(s, ids);
  }
}

std::vector<BoundSymbol> expose(const std::vector<BoundSymbol>& bsyms, const std::unordered_set<int64_t>& used,
                                bool wrap_prims) {
  std::vector<BoundSymbol> out;
  for (const BoundSymbol& b : bsyms) {
    std::unordered_set<int64_t> inner;
    if (!b.top_level_prim) produced_inside(b, inner);
    for (const Tensor& o : b.outputs) inner.erase(id_of(o));
    bool open = false;
    for (int64_t id : inner) open = open || used.count(id) > 0;
    if (!open) {
      out.push_back(b);
      continue;
    }
    std::vector<BoundSymbol> parts = expose(b.subsymbols, used, wrap_prims);
    if (wrap_prims)
      for (BoundSymbol& p : parts)
        if (p.subsymbols.empty()) {
          BoundSymbol top = p;
          top.subsymbols = {p};
          top.top_level_prim = true;
          p = std::move(top);
        }
    out.insert(out.end(), parts.begin(), parts.end());
  }
  return out;
}

// The prim a top-level line computes its one output with: the line itself,
// or an op whose decomposition is that one prim alone.
const BoundSymbol* sole_prim(const BoundSymbol& b) {
  if (b.is_fusion() || b.outputs.size() != 1 || b.executor) return nullptr;
  if (b.subsymbols.empty()) return &b;
  const BoundSymbol& s = b.subsymbols[0];
  if (b.subsymbols.size() != 1 || s.outputs.size() != 1 || id_of(s.outputs[0]) != id_of(b.outputs[0]) ||
      !s.subsymbols.empty())
    return nullptr;
  return &s;
}

namespace {

bool is_zero(const Value& v) { return !v.is_tensor && v.scalar.value == 0.0; }
bool is_tensor(const Value& v, int64_t id) { return v.is_tensor && v.tensor.defined() && id_of(v.tensor) == id; }

// le(y, 0); where(mask, 0, y).
bool is_mask(const BoundSymbol& b, int64_t y) {
  const BoundSymbol* p = sole_prim(b);
  return p && p->call.op == OpId::le && p->call.args.size() == 2 && is_tensor(p->call.args[0], y) &&
         is_zero(p->call.args[1]);
}
bool is_select(const BoundSymbol& b, int64_t mask, int64_t y) {
  const BoundSymbol* p = sole_prim(b);
  return p && p->call.op == OpId::where && p->call.args.size() == 3 && is_tensor(p->call.args[0], mask) &&
         is_zero(p->call.args[1]) && is_tensor(p->call.args[2], y);
}

}  // namespace

std::optional<RecordedRelu> recorded_relu(const Trace& t, const std::vector<size_t>& readers, int64_t y) {
  if (readers.size() != 2) return std::nullopt;
  size_t g = readers[0], s = readers[1];
  if (!is_mask(t.bsyms[g], y)) std::swap(g, s);
  if (!is_mask(t.bsyms[g], y)) return std::nullopt;
  if (!is_select(t.bsyms[s], id_of(t.bsyms[g].outputs[0]), y)) return std::nullopt;
  return RecordedRelu{g, s};
}

}  // namespace volt::jit
