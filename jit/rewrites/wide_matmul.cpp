#include <volt/jit/rewrites/wide_matmul.h>

#include <unordered_map>
#include <unordered_set>

#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>

namespace volt::jit {

namespace {

// A matmul of two bf16 CPU matrices, rounding its result to bf16.
const BoundSymbol* bf16_matmul(const BoundSymbol& b) {
  const BoundSymbol* p = sole_prim(b);
  if (!p || p->call.op != OpId::matmul || p->call.attrs.flag || p->call.args.size() != 2) return nullptr;
  for (const Value& v : p->call.args)
    if (!v.is_tensor || !v.tensor.defined() || v.tensor.dtype() != DType::bf16 || !v.tensor.device().is_cpu())
      return nullptr;
  return p;
}

// Whether `b` converts tensor `y` to f32.
bool widens(const BoundSymbol& b, int64_t y) {
  const BoundSymbol* p = sole_prim(b);
  return p && p->call.op == OpId::convert_element_type && p->call.attrs.dtype == DType::f32 &&
         p->call.args.size() == 1 && p->call.args[0].is_tensor && id_of(p->call.args[0].tensor) == y;
}

}  // namespace

void wide_matmul_pass(std::vector<Trace>& traces) {
  auto t0 = Clock::now();
  const Trace& t = traces.back();
  std::unordered_map<int64_t, std::vector<size_t>> readers;  // value -> the top-level lines reading it
  const std::unordered_set<int64_t> pinned = pinned_values(t);  // returned, or read by a guard
  for (size_t i = 0; i < t.bsyms.size(); ++i)
    for (const Tensor& a : tensor_args(t.bsyms[i])) readers[id_of(a)].push_back(i);

  std::unordered_map<size_t, BoundSymbol> replace;  // line -> its new form
  std::unordered_set<size_t> drop;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol* mm = bf16_matmul(t.bsyms[i]);
    if (!mm) continue;
    const int64_t y = id_of(mm->outputs[0]);
    auto it = readers.find(y);
    if (pinned.count(y) || it == readers.end() || it->second.size() != 1) continue;
    const size_t r = it->second[0];
    if (!widens(t.bsyms[r], y)) continue;
    BoundSymbol f = *mm;
    f.call.attrs.flag = true;  // out_dtype=f32
    f.outputs = {t.bsyms[r].outputs[0]};
    f.top_level_prim = true;
    f.scalar_names.clear();
    replace[i] = std::move(f);
    drop.insert(r);
  }
  if (replace.empty()) return;
  Trace out = with_replaced(t, replace, drop);
  out.provenance = "Wide bf16 matmul";
  out.millis = ms_since(t0);
  traces.push_back(std::move(out));
}

namespace {

// Before claim; in the jit it also sees the backward trace, where the pairs are.
const bool g_wide_matmul_registered = [] {
  register_pass({"Wide bf16 matmul", PassStage::Prims, /*rewrite=*/true, /*opt_in=*/false, wide_matmul_pass});
  return true;
}();

}  // namespace

}  // namespace volt::jit
