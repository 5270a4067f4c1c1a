// What a jitted function can tell about itself: its cache, its traces, the
// cost of its last compile and the kernels it runs.
#include <algorithm>
#include <unordered_set>

#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>

namespace volt::jit {

size_t JitFunction::cache_entries() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  size_t n = 0;
  for (const auto& [hash, buckets] : state_->cache)
    for (const Bucket& b : buckets) n += b.entries.size();
  return n;
}

JitFunction::CompileStats JitFunction::compile_stats() const {
  CompileStats st;
  std::shared_ptr<Entry> last;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    last = state_->last;
  }
  if (!last) return st;
  std::unordered_set<std::string> keys;
  for (const std::vector<Trace>* list : {&last->traces, &last->backward_traces})
    for (const Trace& t : *list) {
      st.passes.push_back({t.name + ": " + t.provenance, t.millis});
      st.total_ms += t.millis;
      if (&t != &list->back()) continue;
      for (const BoundSymbol& b : t.bsyms)
        if (b.kernel) {
          ++st.fusions;
          keys.insert(b.kernel->key);
        }
    }
  st.kernels = static_cast<int>(keys.size());
  return st;
}

std::vector<JitFunction::EntryInfo> JitFunction::entry_infos() const {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& [hash, buckets] : state_->cache)
      for (const Bucket& b : buckets) all.insert(all.end(), b.entries.begin(), b.entries.end());
    if (all.empty() && state_->last) all.push_back(state_->last);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a->compile < b->compile; });
  std::vector<EntryInfo> r;
  for (const auto& e : all) r.push_back({e->key, e->reason, e->compile, e->hits.load(), e->traces, e->backward_traces});
  return r;
}

std::vector<std::string> JitFunction::miss_history() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->miss_history;
}

const std::vector<Trace>& JitFunction::last_backward_traces() const {
  static const std::vector<Trace> none;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->last ? state_->last->backward_traces : none;
}

const std::vector<Trace>& JitFunction::last_traces() const {
  static const std::vector<Trace> none;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->last ? state_->last->traces : none;
}

std::vector<std::string> last_kernel_sources(const JitFunction& f) {
  std::vector<std::string> r;
  for (const std::vector<Trace>* list : {&f.last_traces(), &f.last_backward_traces()})
    if (!list->empty())
      for (const BoundSymbol& b : list->back().bsyms)
        if (b.kernel) r.push_back(kernel_source(b));
  return r;
}

std::vector<std::shared_ptr<const FusedKernel>> last_kernels(const JitFunction& f) {
  std::vector<std::shared_ptr<const FusedKernel>> r;
  for (const std::vector<Trace>* list : {&f.last_traces(), &f.last_backward_traces()})
    if (!list->empty())
      for (const BoundSymbol& b : list->back().bsyms)
        if (b.kernel) r.push_back(b.kernel);
  return r;
}

}  // namespace volt::jit
