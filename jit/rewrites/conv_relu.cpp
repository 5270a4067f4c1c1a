#include <volt/jit/rewrites/conv_relu.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>

namespace volt::jit {

namespace {

// The convolution prim (without ReLU) a top-level line computes its one
// output with: the prim itself, or an op whose decomposition is that prim alone.
const BoundSymbol* plain_convolution(const BoundSymbol& b) {
  if (b.is_fusion() || b.outputs.size() != 1 || b.executor) return nullptr;
  const BoundSymbol* p = &b;
  if (!b.subsymbols.empty()) {
    if (b.subsymbols.size() != 1 || b.subsymbols[0].outputs.size() != 1 ||
        id_of(b.subsymbols[0].outputs[0]) != id_of(b.outputs[0]))
      return nullptr;
    p = &b.subsymbols[0];
  }
  if (p->call.op != OpId::convolution || p->call.attrs.flag || !p->subsymbols.empty()) return nullptr;
  return p;
}

// The fused prim: the convolution's call with its relu flag, making `out`.
BoundSymbol fused(const BoundSymbol& conv, const Tensor& out) {
  BoundSymbol f = conv;
  f.call.attrs.flag = true;
  f.outputs = {out};
  f.top_level_prim = true;
  f.scalar_names.clear();
  return f;
}

}  // namespace

void conv_relu_pass(std::vector<Trace>& traces) {
  auto t0 = Clock::now();
  const Trace& t = traces.back();
  // The top-level lines reading each value (a value read twice by one line counts twice).
  std::unordered_map<int64_t, std::vector<size_t>> readers;
  const std::unordered_set<int64_t> pinned = pinned_values(t);  // returned, or read by a guard
  for (size_t i = 0; i < t.bsyms.size(); ++i)
    for (const Tensor& a : tensor_args(t.bsyms[i])) readers[id_of(a)].push_back(i);

  std::unordered_map<size_t, BoundSymbol> replace;  // line -> its new form
  std::unordered_set<size_t> drop;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol* conv = plain_convolution(t.bsyms[i]);
    if (!conv) continue;
    const int64_t y = id_of(conv->outputs[0]);
    if (pinned.count(y)) continue;
    const std::vector<size_t>& rs = readers[y];
    if (rs.size() == 1) {
      const BoundSymbol& r = t.bsyms[rs[0]];
      if (r.is_fusion() || r.call.op != OpId::relu || r.outputs.size() != 1) continue;
      replace[i] = fused(*conv, r.outputs[0]);
      drop.insert(rs[0]);
    } else if (const std::optional<RecordedRelu> rr = recorded_relu(t, rs, y)) {
      // le(y, 0) then where(that, 0, y), in either order of the two readers.
      const size_t g = rr->mask;
      const Tensor& mask = t.bsyms[g].outputs[0];
      const Tensor& out = t.bsyms[rr->select].outputs[0];
      replace[i] = fused(*conv, out);
      drop.insert(rr->select);
      // The mask from the fused output, if anything still reads it.
      const size_t mask_reads = readers[id_of(mask)].size();
      if (mask_reads > 1 || pinned.count(id_of(mask))) {
        BoundSymbol m;
        m.call = sole_prim(t.bsyms[g])->call;  // le(y, 0) itself (recorded_relu looks through an op of it alone)
        m.call.args[0] = Value(out);
        m.outputs = {mask};
        m.top_level_prim = true;
        m.scalar_names = t.bsyms[g].scalar_names;
        replace[g] = std::move(m);
      } else {
        drop.insert(g);
      }
    }
  }

  if (replace.empty()) return;
  Trace r = with_replaced(t, replace, drop);
  r.provenance = "Convolution and ReLU";
  r.millis = ms_since(t0);
  traces.push_back(std::move(r));
}

namespace {

// Before claim, and in the jit before the grad pass: the fused prim's VJP reads its output.
const bool g_conv_relu_registered = [] {
  register_pass({"Convolution and ReLU", PassStage::Prims, /*rewrite=*/true, /*opt_in=*/false, conv_relu_pass});
  return true;
}();

}  // namespace

}  // namespace volt::jit
