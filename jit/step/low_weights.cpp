#include <volt/jit/step/low_weights.h>

#include <algorithm>
#include <unordered_map>

#include <volt/jit/passes.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

LowWeights low_weights_pass(const Trace& t, ProxyNames& names, size_t num_state, size_t num_outputs,
                            std::vector<size_t>& updated_state, const std::vector<bool>& cached) {
  auto t0 = Clock::now();
  LowWeights r{t, {}};
  // The new value of each updated state tensor, by the state's index.
  std::unordered_map<size_t, Tensor> new_value;
  for (size_t k = 0; k < updated_state.size(); ++k) new_value[updated_state[k]] = t.outputs.at(num_outputs + k);
  std::unordered_map<int64_t, size_t> state_of;  // input id -> state index
  for (size_t i = 0; i < num_state; ++i) state_of[id_of(t.inputs[i])] = i;

  std::unordered_map<int64_t, Tensor> read_copy;   // a cast's value -> the copy input
  std::unordered_map<int64_t, Tensor> made_after;  // a new weight's id -> its cast, to record after it
  std::vector<Tensor> copies;
  std::vector<BoundSymbol> kept;
  std::unordered_map<size_t, bool> lifted;
  std::unordered_map<int64_t, bool> returned;  // a returned cast stays: the copy changes during the call
  for (const Tensor& o : t.outputs) returned[id_of(o)] = true;
  for (const BoundSymbol& b : t.bsyms) {
    const BoundSymbol* p = sole_prim(b);
    if (p && p->call.op == OpId::convert_element_type && is_half(p->call.attrs.dtype) && p->call.args[0].is_tensor) {
      auto s = state_of.find(id_of(p->call.args[0].tensor));
      if (s != state_of.end() && s->second < cached.size() && cached[s->second] && new_value.count(s->second) &&
          !lifted.count(s->second) && !returned.count(id_of(b.outputs[0])) &&
          p->call.args[0].tensor.dtype() == DType::f32) {
        const Tensor& w = t.inputs[s->second];
        Tensor c = names.make({w.sizes(), p->call.attrs.dtype, w.device()}, &names,
                              names.name(w) + "_" + dtype_name(p->call.attrs.dtype));
        read_copy[id_of(b.outputs[0])] = c;
        made_after[id_of(new_value[s->second])] = c;
        copies.push_back(c);
        r.params.push_back(s->second);
        lifted[s->second] = true;
        continue;  // the forward reads the copy
      }
    }
    kept.push_back(b);
  }
  if (copies.empty()) return r;
  substitute(kept, read_copy);
  // The cast of each updated weight, right after the line making it.
  std::vector<Tensor> new_copies(copies.size());
  r.trace.bsyms.clear();
  for (const BoundSymbol& b : kept) {
    r.trace.bsyms.push_back(b);
    for (const Tensor& o : b.outputs) {
      auto m = made_after.find(id_of(o));
      if (m == made_after.end()) continue;
      const int64_t copy_id = id_of(m->second);
      const size_t j = static_cast<size_t>(
          std::find_if(copies.begin(), copies.end(), [&](const Tensor& c) { return id_of(c) == copy_id; }) -
          copies.begin());
      std::vector<BoundSymbol> cast = record(names, [&] { new_copies[j] = convert_element_type(o, m->second.dtype()); },
                                             /*flatten=*/false);
      r.trace.bsyms.insert(r.trace.bsyms.end(), cast.begin(), cast.end());
    }
  }
  for (const Tensor& c : new_copies)
    VOLT_CHECK(c.defined(), "Low-precision weights", "an updated weight's value is made by no line of the step");
  r.trace.inputs.insert(r.trace.inputs.begin() + static_cast<std::ptrdiff_t>(num_state), copies.begin(), copies.end());
  const auto at = r.trace.outputs.begin() + static_cast<std::ptrdiff_t>(num_outputs + updated_state.size());
  r.trace.outputs.insert(at, new_copies.begin(), new_copies.end());
  for (size_t j = 0; j < copies.size(); ++j) updated_state.push_back(num_state + j);
  r.trace.provenance = "Low-precision weights";
  r.trace.millis = ms_since(t0);
  return r;
}

}  // namespace volt::jit
