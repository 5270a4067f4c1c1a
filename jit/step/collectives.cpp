#include <volt/jit/step/collectives.h>

#include <unordered_map>

#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/custom_op.h>

namespace volt::jit {

bool is_collective(const BoundSymbol& b) {
  return !b.is_fusion() && b.call.op == OpId::custom && custom_op(b.call.attrs.custom).collective;
}

Trace place_collectives_pass(const Trace& t) {
  auto t0 = Clock::now();
  Trace r = t;
  r.bsyms.clear();
  std::unordered_map<int64_t, size_t> made_at;  // value id -> index in r.bsyms of its maker
  for (const BoundSymbol& b : t.bsyms) {
    if (!is_collective(b)) {
      r.bsyms.push_back(b);
      for (const Tensor& o : b.outputs) made_at[id_of(o)] = r.bsyms.size() - 1;
      continue;
    }
    size_t at = 0;
    for (const Tensor& a : tensor_args(b))
      if (auto it = made_at.find(id_of(a)); it != made_at.end()) at = std::max(at, it->second + 1);
    while (at < r.bsyms.size() && is_collective(r.bsyms[at])) ++at;  // after those placed here before
    r.bsyms.insert(r.bsyms.begin() + static_cast<std::ptrdiff_t>(at), b);
    // Everything from `at` on moved down by one.
    for (auto& [id, i] : made_at)
      if (i >= at) ++i;
    for (const Tensor& o : b.outputs) made_at[id_of(o)] = at;
  }
  r.provenance = "Place collectives";
  r.millis = ms_since(t0);
  return r;
}

namespace {

// The compiled step asks for it (jit/step/step.cpp): all-reduces placed after compile.
const bool g_collectives_registered = [] {
  register_pass({"Place collectives", PassStage::Schedule, /*rewrite=*/false, /*opt_in=*/true,
                 [](std::vector<Trace>& traces) { traces.push_back(place_collectives_pass(traces.back())); }});
  return true;
}();

}  // namespace

}  // namespace volt::jit
