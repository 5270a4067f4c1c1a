#include <volt/jit/check.h>

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/tensor/custom_op.h>

namespace volt::jit {

namespace {

struct Checker {
  const ProxyNames* names;
  std::string problem;
  // The scalars the trace unpacks from C1 (a backward's), by name.
  std::unordered_map<std::string, Scalar> scalars;

  std::string name(const Tensor& t) const { return names ? names->name(t) : "#" + std::to_string(id_of(t)); }

  bool fail(const std::string& what) {
    if (problem.empty()) problem = what;
    return false;
  }

  // Lines of one scope: `defined` holds what may be read, `deleted` what was.
  bool lines(const std::vector<BoundSymbol>& bsyms, std::unordered_set<int64_t>& defined,
             std::unordered_set<int64_t>& deleted, const std::string& where) {
    for (const BoundSymbol& b : bsyms) {
      const std::string line = where + (!b.is_fusion() ? std::string(op_name(b.call)) : b.fusion_name);
      for (const Tensor& a : tensor_args(b)) {
        if (deleted.count(id_of(a))) return fail(line + " reads " + name(a) + " after its del");
        if (!defined.count(id_of(a))) return fail(line + " reads " + name(a) + ", which is not defined before it");
      }
      for (size_t i = 0; i < b.scalar_names.size(); ++i) {
        const std::string& n = b.scalar_names[i];
        if (n.empty()) continue;
        if (i >= b.call.args.size() || b.call.args[i].is_tensor)
          return fail(line + " names argument " + std::to_string(i) + " " + n + ", which is not a scalar");
        auto it = scalars.find(n);
        if (it == scalars.end()) return fail(line + " reads " + n + ", which C1 never unpacks");
        const Scalar& got = b.call.args[i].scalar;
        if (it->second.kind != got.kind || it->second.value != got.value)
          return fail(line + " reads " + n + " as " + got.repr() + ", but C1 holds " + it->second.repr());
      }
      if (!b.subsymbols.empty() && !b.top_level_prim) {
        // A fusion sees only its inputs; a decomposition what its op sees.
        std::unordered_set<int64_t> inner, inner_deleted;
        if (b.is_fusion()) {
          for (const Tensor& a : b.fusion_inputs) inner.insert(id_of(a));
        } else {
          inner = defined;
          inner_deleted = deleted;
        }
        if (!lines(b.subsymbols, inner, inner_deleted, line + " > ")) return false;
        for (const Tensor& o : b.outputs)
          if (!inner.count(id_of(o))) return fail(line + " returns " + name(o) + ", which its body never computes");
      }
      for (const Tensor& o : b.outputs)
        if (!defined.insert(id_of(o)).second) return fail(line + " defines " + name(o) + " a second time");
      for (const Tensor& d : b.del_after) {
        if (!defined.count(id_of(d))) return fail(line + ": del of " + name(d) + ", which is not defined");
        if (!deleted.insert(id_of(d)).second) return fail(line + ": " + name(d) + " is deleted twice");
      }
    }
    return true;
  }
};

const ProxyNames* names_in(const Trace& t) { return t.names.get(); }

}  // namespace

std::string trace_problem(const Trace& t) {
  Checker c{names_in(t), {}, {}};
  std::unordered_set<int64_t> defined, deleted;
  for (const NamedScalar& s : t.scalars) {
    if (s.name.empty()) return "a scalar saved for backward has no name";
    // An augmented forward returns the values; only a backward defines the names.
    if (t.kind == Trace::Kind::Backward && !c.scalars.emplace(s.name, s.value).second)
      return "C1 unpacks " + s.name + " twice";
  }
  for (const Tensor& x : t.inputs)
    if (!defined.insert(id_of(x)).second) return "input " + c.name(x) + " appears twice in the signature";
  // A guard computes its value from the inputs alone.
  for (const Guard& g : t.guards) {
    std::unordered_set<int64_t> gd = defined, gdel;
    if (!c.lines(g.bsyms, gd, gdel, "guard > ")) return c.problem;
    if (!gd.count(id_of(g.value))) return "a guard reads " + c.name(g.value) + ", which its lines never compute";
  }
  if (!c.lines(t.bsyms, defined, deleted, "")) return c.problem;
  std::vector<Tensor> returned = t.outputs;
  if (t.kind == Trace::Kind::AugmentedForward) returned.insert(returned.end(), t.inputs.begin(), t.inputs.end());
  for (const Tensor& o : returned) {
    if (deleted.count(id_of(o))) return "the return names " + c.name(o) + " after its del";
    if (!defined.count(id_of(o))) return "the return names " + c.name(o) + ", which is never defined";
  }
  return "";
}

void check_trace(const Trace& t) {
  std::string p = trace_problem(t);
  if (!p.empty()) throw Error("jit: the trace " + t.name + " (" + t.provenance + ") is not a valid program: " + p);
}

}  // namespace volt::jit
