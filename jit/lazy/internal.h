// The lazy device's insides (private to jit/lazy), shared by its files:
//   record.cpp   ops on lazy tensors become nodes; fallbacks; Tensor::to and copy_
//   graph.cpp    a graph's post-order and cache key, lowering, compile through
//                the jit's pipeline (jit/pipeline.h), the cache
//   plan.cpp     a CPU graph run from a memory plan (jit/step/memory_plan.h)
//   describe.cpp a graph in words, and why it was compiled
//   run.cpp      running a graph here or on the step runner
//   runner.cpp   the step runner: graphs run on a thread of their own (mark_step is async)
//   lazy.cpp     the state, the public API (lazy.h) and the metrics
//
// A lazy tensor has no storage; its TensorImpl::backend_state points at a
// LazyTensor, shared by the tensor's detached copies as storage would be.  The
// LazyTensor names the tensor's current value (an immutable LazyValue); an
// in-place op points it at a new value.  A value is either pending (made by a
// node of the graph) or holds data on the backend device.
#pragma once
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <volt/jit/lazy/describe.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/lazy/runner.h>
#include <volt/jit/trace.h>
#include <volt/tensor/random.h>
#include <volt/tensor/tensor.h>

namespace volt::lazy::detail {

struct Node;

struct LazyValue {
  TensorMeta meta;             // shape and dtype; the device is the lazy device
  std::shared_ptr<Node> node;  // the producer while pending; null once `data` is set
  int output = 0;              // which output of `node`
  Tensor data;                 // on the backend device
  // Or, once its graph was handed to the step runner (mark_step), output
  // `run_index` of that run: `data` is taken from it when the value is read.
  std::shared_ptr<Run> run;
  int run_index = 0;
  // Structural hash: op, attributes, operand hashes, shapes and dtypes; a
  // leaf's is its shape and dtype.  Orders a graph's roots canonically.
  uint64_t hash = 0;
};
using ValuePtr = std::shared_ptr<LazyValue>;

struct Operand {
  enum Kind : uint8_t { Value, Scalar, Undefined } kind = Undefined;
  ValuePtr value;
  volt::Scalar scalar;
  // A scalar passed at run time as a zero-dim tensor of this dtype (the dtype
  // the op computes in, so the result is the same as with the constant).
  bool runtime = false;
  DType runtime_dtype = DType::f32;
};

struct Node {
  OpId op;
  Attrs attrs;
  std::vector<Operand> operands;
  std::vector<TensorMeta> outputs;
  // Whether a non-elementwise op (matmul, a reduction) is among the pending
  // work behind this node, and the order to visit operands in: those first.
  // Then an elementwise chain (an optimizer's update) is laid out in one run,
  // after the matmul it needs, and fuses into one kernel.
  bool heavy = false;
  std::vector<uint8_t> visit_order;
};

struct LazyTensor {
  ValuePtr value;
  // A view (reshape, permute, expand, narrow of a lazy tensor) remembers its
  // base and the base's value it was taken from: when the base is written in
  // place, reading the view replays the view op on the new value, as reading
  // shared storage would.  Writing into a view is not supported.
  std::shared_ptr<LazyTensor> base;
  ValuePtr base_value;
  OpId view_op = OpId::reshape;
  Attrs view_attrs;
  // The value with data it held before the in-place writes that made its
  // pending value: the old value a CUDA graph's replay writes the new one over.
  std::weak_ptr<LazyValue> prior;
};
// Per pending value of a live lazy tensor, that tensor's prior value.
using Priors = std::unordered_map<const LazyValue*, const LazyValue*>;

// Why a graph runs (counted as RunGraph.<reason_name>).
enum class Reason { ValueNeeded, MarkStep, SizeLimit, Fallback };
const char* reason_name(Reason r);

struct Plans;   // plan.cpp: an entry's memory plans
struct Replay;  // replay.cpp: an entry's captured CUDA graph

// A compiled graph: its traces (the last one runs) and the names they print
// with; its memory plans on the CPU or its captured graph on CUDA and, per
// root, the leaf whose buffer the root may be written into (or -1).
struct Entry {
  std::string key;
  std::shared_ptr<jit::ProxyNames> names;
  std::vector<jit::Trace> traces;
  std::vector<int> donatable;
  std::shared_ptr<Plans> plans;
  std::shared_ptr<Replay> replay;
};

// The graph behind some values, in post-order, and its cache key.  The key
// lists every node (op, attributes, output shapes and dtypes) with its
// operands as positions in this order, so it captures how values are shared;
// leaves enter by shape and dtype, runtime scalars by dtype, and random draws
// by their counter offset relative to the graph's first draw.
struct Graph {
  std::vector<ValuePtr> leaves;         // inputs with data, in first-use order
  std::vector<const Operand*> scalars;  // runtime scalars, in order
  std::vector<Node*> nodes;             // post-order
  std::vector<ValuePtr> roots;
  std::string key;
  bool has_rng = false;
  PhiloxState rng;  // seed and offset of the first draw
};

using Clock = std::chrono::steady_clock;
inline int64_t us_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// Settings read at start-up (lazy.cpp).
Device backend_from_env();
std::set<std::string> fallback_from_env();
AsyncMode async_from_env();
bool memory_plan_from_env();

struct State {
  Device backend = backend_from_env();
  AsyncMode async = async_from_env();
  bool memory_plan = memory_plan_from_env();
  std::set<std::string> forced_fallback = fallback_from_env();
  size_t size_limit = 100000;
  size_t pending_nodes = 0;  // recorded since the last graph of every live tensor ran

  std::vector<std::weak_ptr<LazyTensor>> live;  // every lazy tensor made, pruned now and then
  size_t live_after_prune = 0;

  size_t cache_capacity = 1024;
  std::list<std::shared_ptr<Entry>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::shared_ptr<Entry>>::iterator> cache;
  std::shared_ptr<Entry> last_compiled;
  GraphDesc last_desc;      // the last compiled graph in words
  std::string last_reason;  // why it was compiled

  std::map<std::string, int64_t> counters;
  int64_t nodes_recorded = 0;  // kept apart: bumped on every op
};

State& S();
void count(const std::string& name, int64_t by = 1);
// The step runner; constructed after State, so destroyed before it.
Runner& runner();

// Structural hashing (record.cpp's node hashes, a leaf's hash).
inline uint64_t mix(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }
inline uint64_t hash_meta(uint64_t h, const TensorMeta& m) {
  h = mix(h, static_cast<uint64_t>(m.dtype));
  for (int64_t d : m.sizes) h = mix(h, static_cast<uint64_t>(d));
  return mix(h, m.sizes.size());
}
inline uint64_t leaf_hash(const TensorMeta& m) { return hash_meta(101, m); }

// record.cpp: tensors and their values.
std::shared_ptr<LazyTensor> state_of(const Tensor& t);
void prune_live();
ValuePtr current(LazyTensor& st);  // a view's value replays its op when its base moved on

// graph.cpp: keys, lowering, the compiled-graph cache.
Graph build_graph(std::vector<ValuePtr> roots);
jit::Trace lower(const Graph& g, const std::shared_ptr<jit::ProxyNames>& names);
std::shared_ptr<Entry> lookup_or_compile(const Graph& g, Reason why);

// plan.cpp: running a CPU graph from a memory plan, writing new values into
// the buffers of old ones no one can read any more.
//   attach_plans: readies a compiled CPU graph for plans; its donatable
//     roots are those a fused kernel makes from a leaf of the same shape.
//   dead_leaves: per root, its candidate leaf if nothing outside the graph
//     holds that leaf's value (a mark_step graph only), else -1.
//   run_planned: runs the trace; `donate` as dead_leaves gave, `handles` the
//     number of tensor handles each donated input has when no one else holds it.
void attach_plans(Entry& e, size_t num_leaves);
std::vector<int> dead_leaves(const Graph& g, const Entry& e, Reason why);
// The same for other candidates: per root, its lazy tensor's prior value if
// it is a leaf of the graph (replaced_leaves), else -1.
std::vector<int> dead_leaves(const Graph& g, const std::vector<int>& candidates, Reason why);
std::vector<int> replaced_leaves(const Graph& g, const Priors& priors);
// Per leaf: whether nothing outside the graph holds its value (a mark_step graph only).
std::vector<bool> unread_leaves(const Graph& g, Reason why);
std::vector<Tensor> run_planned(Entry& e, const std::vector<Tensor>& in, const PhiloxState& rng,
                                const std::vector<int>& donate, long handles);
int64_t take_donated();  // roots written in place since the last call (Plan.donated)

// replay.cpp: running a CUDA graph as a captured CUDA graph (no allocation a run).
//   attach_replay: readies a compiled CUDA graph for it.
//   run_replayed: runs the graph from its capture (captured on its second
//     run), `donate` as dead_leaves gave, `unread` as unread_leaves gave and
//     `handles` as for run_planned; false when it did not run (the caller
//     interprets the graph).
// The runtime scalars as 8-byte slots (the bits of each value in its dtype).
struct ScalarSlots {
  std::vector<uint64_t> bits;
  std::vector<DType> dtypes;
};
void attach_replay(Entry& e);
bool run_replayed(Entry& e, const std::vector<Tensor>& leaves, const ScalarSlots& slots, const PhiloxState& rng,
                  const std::vector<int>& donate, const std::vector<bool>& unread, long handles,
                  std::vector<Tensor>& out);

// describe.cpp: the graph in words, for the compile reason.
GraphDesc describe_graph(const Graph& g);

// lazy.cpp: whether a mark_step's graph goes to the step runner now.
bool async_now();

// run.cpp: running graphs and reading their values.
ScalarSlots scalar_slots(const std::vector<const Operand*>& scalars);
void run_graph(std::vector<ValuePtr> values, Reason why, const Priors& priors = {});
void run_live(Reason why);  // the graph of every live lazy tensor
void settle(LazyValue& v);  // waits for the step run that makes v, takes its data
const Tensor& data_of(const ValuePtr& v, Reason why);

}  // namespace volt::lazy::detail
