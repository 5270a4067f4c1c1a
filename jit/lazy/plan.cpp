// A CPU graph run from a memory plan (jit/step/memory_plan.h): intermediates in an
// arena kept with the compiled graph, and a tensor's new value written into
// the buffer of the old value it replaces when no one can read that old value
// any more (jit/lazy/internal.h lists the functions).
//
// Whether an old value can be read again is decided in two places.  When the
// graph is handed over (the recording thread): a mark_step graph has every
// live lazy tensor's pending value as a root, so a leaf whose value is held
// only by the graph's own nodes is read by nothing after the run; a graph run
// because one value was needed leaves other pending nodes behind, which may
// read any leaf, so it donates nothing.  When the graph runs: the leaf's
// tensor must be contiguous, the only tensor on its memory, and held by no
// more handles than the run's own (another lazy value may share the tensor:
// a fallback op can return its input).  The plan itself then checks that the
// fused kernel making the new value is the last reader of the old one, at the
// same element, and that no view of the old value is kept.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

#include <volt/jit/codegen.h>
#include <volt/jit/interpreter.h>
#include <volt/jit/lazy/internal.h>
#include <volt/jit/step/memory_plan.h>

namespace volt::lazy::detail {

// One plan: the trace with its donated roots moved last among its outputs
// (where MemoryPlan wants a state's new values), and where each root went.
struct Planned {
  jit::Trace trace;
  std::unique_ptr<jit::MemoryPlan> plan;  // null: no plan for this graph; interpret it
  std::vector<size_t> position;           // per root, its output index in `trace`
  std::vector<int> donated;               // per root, the leaf written in place, or -1
};

std::atomic<int64_t> g_donated{0};  // runs may be on the step runner's thread

int64_t take_donated() { return g_donated.exchange(0); }

struct Plans {
  std::mutex mutex;  // a plan's buffers serve one run at a time
  std::map<std::vector<int>, std::shared_ptr<Planned>> by_donation;
};

namespace {

// Per root, a leaf of its shape and dtype that the fused kernel making it
// reads (each leaf given to one root at most), or -1.
std::vector<int> donation_candidates(const jit::Trace& t, size_t num_leaves) {
  std::unordered_map<int64_t, const jit::BoundSymbol*> producer;
  for (const jit::BoundSymbol& b : t.bsyms)
    for (const Tensor& o : b.outputs) producer[jit::id_of(o)] = &b;
  std::unordered_map<int64_t, int> leaf;
  for (size_t i = 0; i < num_leaves && i < t.inputs.size(); ++i) leaf[jit::id_of(t.inputs[i])] = static_cast<int>(i);
  std::vector<int> r(t.outputs.size(), -1);
  std::vector<bool> taken(num_leaves, false);
  for (size_t j = 0; j < t.outputs.size(); ++j) {
    const Tensor& o = t.outputs[j];
    auto it = producer.find(jit::id_of(o));
    if (it == producer.end()) continue;
    const jit::BoundSymbol& b = *it->second;
    if (!b.is_fusion() || !b.kernel || !b.kernel->fn || b.kernel->row_len > 0) continue;
    for (const Tensor& a : jit::tensor_args(b)) {
      auto l = leaf.find(jit::id_of(a));
      if (l == leaf.end() || taken[static_cast<size_t>(l->second)] || a.sizes() != o.sizes() || a.dtype() != o.dtype())
        continue;
      r[j] = l->second;
      taken[static_cast<size_t>(l->second)] = true;
      break;
    }
  }
  return r;
}

}  // namespace

void attach_plans(Entry& e, size_t num_leaves) {
  e.plans = std::make_shared<Plans>();
  e.donatable = donation_candidates(e.traces.back(), num_leaves);
}

std::vector<int> dead_leaves(const Graph& g, const Entry& e, Reason why) {
  if (!e.plans) return std::vector<int>(g.roots.size(), -1);
  return dead_leaves(g, e.donatable, why);
}

std::vector<int> replaced_leaves(const Graph& g, const Priors& priors) {
  std::unordered_map<const LazyValue*, int> leaf;
  for (size_t l = 0; l < g.leaves.size(); ++l) leaf[g.leaves[l].get()] = static_cast<int>(l);
  std::vector<int> r(g.roots.size(), -1);
  std::vector<bool> taken(g.leaves.size(), false);
  for (size_t j = 0; j < r.size(); ++j) {
    auto p = priors.find(g.roots[j].get());
    if (p == priors.end()) continue;
    auto l = leaf.find(p->second);
    if (l == leaf.end() || taken[static_cast<size_t>(l->second)]) continue;
    const TensorMeta& old = g.leaves[static_cast<size_t>(l->second)]->meta;
    if (old.sizes != g.roots[j]->meta.sizes || old.dtype != g.roots[j]->meta.dtype) continue;
    r[j] = l->second;
    taken[static_cast<size_t>(l->second)] = true;
  }
  return r;
}

std::vector<bool> unread_leaves(const Graph& g, Reason why) {
  std::vector<bool> r(g.leaves.size(), false);
  if (why != Reason::MarkStep && why != Reason::SizeLimit) return r;
  std::unordered_map<const LazyValue*, long> refs;  // held by the graph's own nodes
  for (const Node* n : g.nodes)
    for (const Operand& o : n->operands)
      if (o.kind == Operand::Value && !o.value->node) ++refs[o.value.get()];
  for (size_t l = 0; l < r.size(); ++l) {
    const ValuePtr& v = g.leaves[l];
    r[l] = v.use_count() == 1 + refs[v.get()];  // 1: g.leaves
  }
  return r;
}

std::vector<int> dead_leaves(const Graph& g, const std::vector<int>& candidates, Reason why) {
  std::vector<int> r(g.roots.size(), -1);
  if (candidates.size() != g.roots.size()) return r;
  const std::vector<bool> unread = unread_leaves(g, why);
  for (size_t j = 0; j < r.size(); ++j)
    if (candidates[j] >= 0 && unread[static_cast<size_t>(candidates[j])]) r[j] = candidates[j];
  return r;
}

namespace {

std::shared_ptr<Planned> make_plan(const jit::Trace& t, const std::vector<int>& donate) {
  auto p = std::make_shared<Planned>();
  p->trace = t;
  p->donated = donate;
  p->position.resize(donate.size());
  std::vector<Tensor> outs;
  std::vector<size_t> updated;
  for (size_t j = 0; j < donate.size(); ++j)
    if (donate[j] < 0) p->position[j] = outs.size(), outs.push_back(t.outputs[j]);
  const size_t num_outputs = outs.size();
  for (size_t j = 0; j < donate.size(); ++j)
    if (donate[j] >= 0) {
      p->position[j] = outs.size();
      outs.push_back(t.outputs[j]);
      updated.push_back(static_cast<size_t>(donate[j]));
    }
  p->trace.outputs = std::move(outs);
  p->plan = std::make_unique<jit::MemoryPlan>(p->trace, 0, num_outputs, updated, /*outputs_in_arena=*/false);
  return p;
}

// The plan for these donations.  A root the plan would not write in place
// (its old value is read after the kernel, or a view of it is kept) is left
// out and the plan made again, so that nothing is copied back into an old
// buffer someone may still read.
std::shared_ptr<Planned> plan_for(Plans& ps, const jit::Trace& t, const std::vector<int>& donate) {
  if (auto it = ps.by_donation.find(donate); it != ps.by_donation.end()) return it->second;
  std::shared_ptr<Planned> p;
  try {
    p = make_plan(t, donate);
    const std::vector<size_t>& done = p->plan->donated_state();
    std::vector<int> kept = donate;
    for (int& l : kept)
      if (l >= 0 && std::find(done.begin(), done.end(), static_cast<size_t>(l)) == done.end()) l = -1;
    if (kept != donate) p = plan_for(ps, t, kept);
  } catch (const Error&) {
    p = std::make_shared<Planned>();  // a program the plan cannot place: interpreted
  }
  ps.by_donation[donate] = p;
  return p;
}

}  // namespace

std::vector<Tensor> run_planned(Entry& e, const std::vector<Tensor>& in, const PhiloxState& rng,
                                const std::vector<int>& donate_in, long handles) {
  const jit::Trace& t = e.traces.back();
  std::vector<int> donate = donate_in;
  if (donate.size() != t.outputs.size()) donate.assign(t.outputs.size(), -1);
  for (int& l : donate) {
    if (l < 0) continue;
    const Tensor& x = in.at(static_cast<size_t>(l));
    const std::shared_ptr<TensorImpl>& impl = x.impl_ptr();
    if (!x.is_contiguous() || !impl->storage || impl->storage.use_count() != 1 || impl.use_count() != handles) l = -1;
  }
  std::lock_guard<std::mutex> lock(e.plans->mutex);
  std::shared_ptr<Planned> p = plan_for(*e.plans, t, donate);
  if (!p->plan) return jit::interpret(t, in, &rng);
  std::vector<Tensor> outs = p->plan->run(p->trace, in, &rng);
  std::vector<Tensor> r(t.outputs.size());
  for (int l : p->donated) g_donated += l >= 0;
  for (size_t j = 0; j < r.size(); ++j) {
    const Tensor& o = outs[p->position[j]];
    // A donated root is its old value's buffer, any other its own, except a
    // view of an intermediate: that is in the arena, which the next run overwrites.
    r[j] = p->plan->in_arena(o) ? o.clone() : o;
  }
  return r;
}

}  // namespace volt::lazy::detail
