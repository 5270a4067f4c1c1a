#include <volt/jit/rewrites/column_sum.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/fusion.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/cpu/column_sums.h>

namespace volt::jit {

namespace {

// The prim of a bound symbol that is one (a volt op holding one prim, or the prim).
const BoundSymbol& prim_of(const BoundSymbol& b) { return b.subsymbols.size() == 1 ? b.subsymbols.front() : b; }

bool widens_bf16(const BoundSymbol& p) {
  if (p.call.op != OpId::convert_element_type || p.outputs.size() != 1 || p.call.args.empty() ||
      !p.call.args[0].is_tensor)
    return false;
  const Tensor& in = p.call.args[0].tensor;
  return in.defined() && in.dtype() == DType::bf16 && in.device().is_cpu() && p.outputs[0].dtype() == DType::f32;
}

// How many leading dims an f32 CPU sum reduces (0 if not a sum over exactly
// the leading dims of a matrix or more).
int64_t leading_dims(const BoundSymbol& p) {
  if (p.is_fusion() || p.call.op != OpId::sum || p.outputs.size() != 1 || p.call.args.empty() ||
      !p.call.args[0].is_tensor)
    return 0;
  const Tensor& in = p.call.args[0].tensor;
  if (!in.defined() || (in.dtype() != DType::f32 && in.dtype() != DType::bf16) || !in.device().is_cpu() ||
      p.outputs[0].dtype() != in.dtype())
    return 0;
  const std::vector<int64_t>& dims = p.call.attrs.ints;
  std::unordered_set<int64_t> reduced(dims.begin(), dims.end());
  const int64_t lead = static_cast<int64_t>(reduced.size());
  if (lead == 0 || lead >= in.dim() || static_cast<size_t>(lead) != dims.size()) return 0;
  for (int64_t d = 0; d < lead; ++d)
    if (!reduced.count(d)) return 0;
  return lead;
}

}  // namespace

bool is_bf16_column_sum(const BoundSymbol& b) {
  if (!b.is_fusion() || b.kernel || b.fusion_inputs.size() != 1 || b.outputs.size() != 1) return false;
  if (b.subsymbols.size() == 1)  // a bf16 sum, rounded to bf16
    return leading_dims(b.subsymbols[0]) > 0 && b.outputs[0].dtype() == DType::bf16;
  return b.subsymbols.size() == 2 && widens_bf16(b.subsymbols[0]) && leading_dims(b.subsymbols[1]) > 0 &&
         b.outputs[0].dtype() == DType::f32;
}

Trace column_sum_pass(const Trace& t) {
  auto t0 = Clock::now();
  std::unordered_map<int64_t, int> uses;
  std::unordered_map<int64_t, size_t> made_by;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    for (const Tensor& a : tensor_args(t.bsyms[i])) ++uses[id_of(a)];
    for (const Tensor& o : t.bsyms[i].outputs) made_by[id_of(o)] = i;
  }
  for (const Tensor& o : t.outputs) ++uses[id_of(o)];
  int next = 0;  // a fresh region name for a bf16 sum alone
  const std::string prefix = cpu_fusion_executor().prefix();
  for (const BoundSymbol& b : t.bsyms)
    if (b.is_fusion() && b.fusion_name.rfind(prefix, 0) == 0)
      next = std::max(next, std::stoi("0" + b.fusion_name.substr(prefix.size())) + 1);
  std::unordered_map<size_t, size_t> region_of_sum;  // the sum's index -> the widening region's
  std::unordered_set<size_t> taken, alone;           // widening regions taken; bf16 sums on their own
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol& b = t.bsyms[i];
    if (b.is_fusion() || (b.executor && b.executor != &eager_executor()) || leading_dims(prim_of(b)) == 0) continue;
    const Tensor& wide = b.call.args[0].tensor;
    if (wide.dtype() == DType::bf16) {  // sum(x) of bf16 x: the same sums, rounded to bf16 once
      alone.insert(i);
      continue;
    }
    auto m = made_by.find(id_of(wide));
    if (m == made_by.end() || uses[id_of(wide)] != 1 || taken.count(m->second)) continue;
    const BoundSymbol& r = t.bsyms[m->second];
    if (!r.is_fusion() || r.executor != &cpu_fusion_executor() || r.subsymbols.size() != 1 ||
        !widens_bf16(r.subsymbols.front()) || r.outputs.size() != 1 || id_of(r.outputs[0]) != id_of(wide))
      continue;
    region_of_sum[i] = m->second;
    taken.insert(m->second);
  }
  Trace out = t;
  out.bsyms.clear();
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    if (taken.count(i)) continue;
    if (alone.count(i)) {
      BoundSymbol f;
      f.kind = BoundSymbol::Kind::Fusion;
      f.executor = &cpu_fusion_executor();
      f.fusion_name = prefix + std::to_string(next++);
      f.scope = t.bsyms[i].scope;
      BoundSymbol sum = prim_of(t.bsyms[i]);
      sum.executor = nullptr;
      sum.del_after.clear();
      f.fusion_inputs = {sum.call.args[0].tensor};
      f.outputs = t.bsyms[i].outputs;
      f.del_after = t.bsyms[i].del_after;
      f.subsymbols.push_back(std::move(sum));
      out.bsyms.push_back(std::move(f));
      continue;
    }
    auto it = region_of_sum.find(i);
    if (it == region_of_sum.end()) {
      out.bsyms.push_back(t.bsyms[i]);
      continue;
    }
    const BoundSymbol& r = t.bsyms[it->second];
    BoundSymbol f = r;  // its name, scope and executor; the sum joins it
    BoundSymbol sum = prim_of(t.bsyms[i]);
    sum.executor = nullptr;
    sum.del_after.clear();
    f.subsymbols.front().del_after.clear();
    f.subsymbols.push_back(std::move(sum));
    f.outputs = t.bsyms[i].outputs;
    f.kernel = nullptr;  // run by its runner below
    f.del_after.insert(f.del_after.end(), t.bsyms[i].del_after.begin(), t.bsyms[i].del_after.end());
    out.bsyms.push_back(std::move(f));
  }
  out.provenance = "bf16 column sums";
  out.millis = ms_since(t0);
  return out;
}

namespace {

bool has_column_sum(const Trace& t) {
  for (const BoundSymbol& b : t.bsyms)
    if (is_bf16_column_sum(b)) return true;
  return false;
}

// Runs a region of the pass: the f32 sums, rounded to bf16 where the region is a bf16 sum.
std::vector<Tensor> run_column_sum(const BoundSymbol& f, const std::vector<Tensor>& inputs, const PhiloxState&) {
  VOLT_CHECK(inputs.size() == 1 && inputs[0].dtype() == DType::bf16 && inputs[0].device().is_cpu(), f.fusion_name,
             "expects one bf16 CPU tensor to sum, got " << inputs.size() << " inputs"
                                                        << (inputs.empty() ? std::string() : ", the first " + inputs[0].meta_str()));
  const Tensor x = inputs[0].contiguous();
  const int64_t lead = leading_dims(f.subsymbols.back());
  VOLT_CHECK(x.dim() > lead, f.fusion_name, "sums " << lead << " leading dims of " << x.meta_str());
  int64_t rows = 1;
  for (int64_t d = 0; d < lead; ++d) rows *= x.size(d);
  const int64_t cols = rows > 0 ? x.numel() / rows : 0;
  Tensor out = Tensor::empty(f.outputs[0].sizes(), DType::f32, kCPU);
  VOLT_CHECK(out.numel() == cols, f.fusion_name, "expects " << cols << " sums, its output is " << out.meta_str());
  if (rows == 0) std::fill_n(out.data_ptr<float>(), cols, 0.0f);
  else cpu::sum_bf16_columns(static_cast<const BF16*>(x.raw_data()), rows, cols, out.data_ptr<float>());
  if (f.outputs[0].dtype() == DType::f32) return {out};
  // A bf16 sum: each f32 sum rounded once, as the CPU's bf16 reduction rounds
  // its f32 result (tensor/cpu/half.cpp, run_widened).
  Tensor low = Tensor::empty(f.outputs[0].sizes(), DType::bf16, kCPU);
  const float* sums = out.data_ptr<float>();
  BF16* dst = static_cast<BF16*>(low.raw_data());
  for (int64_t j = 0; j < cols; ++j) dst[j] = BF16::from_float(sums[j]);
  return {low};
}

const bool g_column_sum_registered = [] {
  register_pass({"bf16 column sums", PassStage::Regions, /*rewrite=*/true, /*opt_in=*/false,
                 [](std::vector<Trace>& traces) {
                   // A trace with no bf16 sum keeps its list of traces as it was.
                   Trace r = column_sum_pass(traces.back());
                   if (r.bsyms.size() != traces.back().bsyms.size() || has_column_sum(r)) traces.push_back(std::move(r));
                 }});
  register_region_runner({is_bf16_column_sum, run_column_sum});
  return true;
}();

}  // namespace

}  // namespace volt::jit
