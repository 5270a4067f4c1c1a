// Running a graph: here (a value is needed now) or, after mark_step(), on the
// step runner's worker thread (runner.h), and reading the values it makes.
#include <cstring>
#include <unordered_set>

#include <volt/jit/interpreter.h>
#include <volt/jit/lazy/internal.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>

namespace volt::lazy::detail {

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::ValueNeeded: return "value_needed";
    case Reason::MarkStep: return "mark_step";
    case Reason::SizeLimit: return "size_limit";
    case Reason::Fallback: return "fallback";
  }
  return "?";
}

ScalarSlots scalar_slots(const std::vector<const Operand*>& scalars) {
  ScalarSlots r;
  r.bits.assign(scalars.size(), 0);
  for (size_t i = 0; i < scalars.size(); ++i) {
    const Operand& o = *scalars[i];
    r.dtypes.push_back(o.runtime_dtype);
    VOLT_DISPATCH_DTYPE(o.runtime_dtype, [&] {
      const scalar_t v = static_cast<scalar_t>(o.scalar.value);
      std::memcpy(&r.bits[i], &v, sizeof v);
    });
  }
  return r;
}

// A graph's runtime scalars as the zero-dim tensors its trace inputs expect:
// views into one block (8 bytes each).  On the CPU that is one allocation a
// run; on another backend the block is filled on the host and copied over
// whole (two allocations and one copy a run, not one of each per scalar).
std::vector<Tensor> scalar_tensors(const ScalarSlots& slots) {
  std::vector<Tensor> r;
  if (slots.bits.empty()) return r;
  const size_t n = slots.bits.size();
  r.reserve(n);
  std::shared_ptr<Storage> block = Storage::allocate(8 * n, kCPU);
  std::memcpy(block->data, slots.bits.data(), 8 * n);
  for (size_t i = 0; i < n; ++i)
    r.push_back(make_tensor(block, {}, {}, static_cast<int64_t>(8 * i / dtype_size(slots.dtypes[i])), slots.dtypes[i],
                            kCPU));
  const Device to = S().backend;
  if (to.is_cpu()) return r;
  // The 8-byte slots copied as i64 words: bit for bit, whatever each slot holds.
  const Tensor whole = make_tensor(block, {static_cast<int64_t>(n)}, {1}, 0, DType::i64, kCPU).to(to);
  for (size_t i = 0; i < n; ++i)
    r[i] = make_tensor(whole.impl_ptr()->storage, {}, {}, r[i].impl_ptr()->offset, r[i].dtype(), to);
  return r;
}

// Waits for a value handed to the step runner and takes its data; a failed
// run's error is thrown here (and on every later read of its values).
void settle(LazyValue& v) {
  if (!v.run) return;
  count("Time.wait_us", runner().wait(*v.run));
  if (v.run->error) {
    runner().take_error();  // reported now, not again by wait_device_ops
    std::rethrow_exception(v.run->error);
  }
  v.data = v.run->outs.at(static_cast<size_t>(v.run_index));
  v.run.reset();
}

// A graph input as the runner sees it: data, or an earlier run's output.
detail::Input input_of(const LazyValue& v) {
  if (v.run) return {Tensor(), v.run, v.run_index};
  return {v.data, nullptr, 0};
}

// Runs the graph behind `values` (those still pending).  On the CPU with
// asynchronous steps on, a mark_step's graph (or a size-limit cut) goes to the
// step runner and its roots take their data when read; other graphs (a value
// is needed now) wait for the runs they read and run here.
void run_graph(std::vector<ValuePtr> values, Reason why, const Priors& priors) {
  std::vector<ValuePtr> roots;
  std::unordered_set<const LazyValue*> seen;
  for (ValuePtr& v : values)
    if (v && v->node && seen.insert(v.get()).second) roots.push_back(std::move(v));
  if (roots.empty()) return;
  auto t0 = Clock::now();
  State& s = S();
  count(std::string("RunGraph.") + reason_name(why));
  Graph g = build_graph(roots);
  std::shared_ptr<Entry> e = lookup_or_compile(g, why);
  const bool async = async_now() && s.backend.is_cpu() && (why == Reason::MarkStep || why == Reason::SizeLimit);

  // A mark_step graph on the CPU runs from a memory plan (plan.cpp) and may
  // write roots into the buffers of leaves nothing else holds.  Other graphs
  // (a value needed now) are interpreted: they seldom repeat, and a plan keeps
  // its arena as long as the graph is cached.
  const bool planned = s.memory_plan && e->plans && s.backend.is_cpu() &&
                       (why == Reason::MarkStep || why == Reason::SizeLimit);
  // On CUDA such a graph is replayed from a captured CUDA graph (replay.cpp).
  const bool replayed = s.memory_plan && e->replay && !s.backend.is_cpu() &&
                        (why == Reason::MarkStep || why == Reason::SizeLimit);
  // Which new value goes where: on the CPU where the plan's kernel reads an old
  // value of its shape; on CUDA over the value its lazy tensor held before.
  std::vector<int> donate = planned    ? dead_leaves(g, *e, why)
                            : replayed ? dead_leaves(g, replaced_leaves(g, priors), why)
                                       : std::vector<int>();
  const std::vector<bool> unread = replayed ? unread_leaves(g, why) : std::vector<bool>();
  std::vector<bool> donated_leaf(g.leaves.size(), false);
  for (int l : donate)
    if (l >= 0) donated_leaf[static_cast<size_t>(l)] = true;
  // The handles a donated input has in the job when no one else holds it:
  // the job's list and its Input (or the earlier run's outputs), and here,
  // where the graph still holds the leaf, the leaf's own.
  const long handles = async ? 2 : 3;

  std::vector<detail::Input> inputs;
  inputs.reserve(g.leaves.size() + g.scalars.size());
  for (size_t i = 0; i < g.leaves.size(); ++i) {
    LazyValue& l = *g.leaves[i];
    if (!async) settle(l);
    inputs.push_back(input_of(l));
    if (async && donated_leaf[i]) l.data = Tensor();  // read by nothing after this graph
  }
  // A replayed graph copies its scalars' slots into a block of its own.
  ScalarSlots slots = scalar_slots(g.scalars);
  if (!replayed)
    for (Tensor& t : scalar_tensors(slots)) inputs.push_back({std::move(t), nullptr, 0});
  // The job holds its inputs' tensors (and the runs they come from) until it is
  // done, and the compiled entry; nothing of the graph's nodes.
  detail::Runner::Job job = [e, inputs = std::move(inputs), rng = g.rng, async, planned, replayed,
                             slots = std::move(slots), donate = std::move(donate), unread, handles] {
    std::vector<Tensor> in;
    in.reserve(inputs.size());
    for (const detail::Input& i : inputs) in.push_back(detail::resolve(i));  // an earlier run's error passes on
    NoGradGuard no_grad;
    AutocastGuard as_recorded(std::nullopt);  // the graph holds its casts
    auto go = [&] {
      if (replayed) {
        std::vector<Tensor> outs;
        if (run_replayed(*e, in, slots, rng, donate, unread, handles, outs)) return outs;
        for (Tensor& t : scalar_tensors(slots)) in.push_back(std::move(t));
      }
      return planned ? run_planned(*e, in, rng, donate, handles) : jit::interpret(e->traces.back(), in, &rng);
    };
    if (!async) return go();
    try {
      return go();
    } catch (const Error& err) {
      const std::string where = detail::failing_op(e->traces.front(), in, rng);
      throw Error("lazy: the step run after mark_step failed" + (where.empty() ? "" : " in " + where) + ": " + err.what());
    }
  };
  std::shared_ptr<detail::Run> run;
  if (async) {
    run = runner().submit(std::move(job));
  } else {
    run = detail::Runner::run_here(job);
    count("Time.execute_us", run->execute_us);
    if (run->error) std::rethrow_exception(run->error);  // the roots stay pending
  }
  for (size_t i = 0; i < g.roots.size(); ++i) {
    LazyValue& r = *g.roots[i];
    if (async) {
      r.run = run;
      r.run_index = static_cast<int>(i);
    } else {
      r.data = run->outs[i];
    }
    r.node.reset();  // frees the graph behind it once nothing else needs it
    r.hash = leaf_hash(r.meta);  // now a leaf: its history is not structure
  }
  count("Time.sync_us", us_since(t0));
}

// Runs the graph of every live lazy tensor.
void run_live(Reason why) {
  State& s = S();
  prune_live();
  std::vector<ValuePtr> values;
  Priors priors;
  for (const auto& w : s.live)
    if (auto st = w.lock(); st && st->value)
      if (ValuePtr v = current(*st); v->node) {
        if (ValuePtr p = st->prior.lock()) priors.emplace(v.get(), p.get());
        values.push_back(std::move(v));
      }
  s.pending_nodes = 0;
  run_graph(std::move(values), why, priors);
}

const Tensor& data_of(const ValuePtr& v, Reason why) {
  if (v->node) run_graph({v}, why);
  settle(*v);
  return v->data;
}

}  // namespace volt::lazy::detail
