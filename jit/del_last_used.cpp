#include <volt/jit/del_last_used.h>

#include <unordered_set>

#include <volt/jit/passes.h>

namespace volt::jit {

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
    for (const Tensor& u : tensor_args(*it))
      if (!keep.count(id_of(u)) && seen.insert(id_of(u)).second) it->del_after.push_back(u);
  }
  r.provenance = "Delete Last Used";
  r.millis = ms_since(t0);
  return r;
}

}  // namespace volt::jit
