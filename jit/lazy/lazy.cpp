// The lazy device: recording, graph keys, the compiled-graph cache, running.
//
// A lazy tensor has no storage; its TensorImpl::backend_state points at a
// LazyTensor, shared by the tensor's detached copies as storage would be.  The
// LazyTensor names the tensor's current value (an immutable LazyValue); an
// in-place op points it at a new value.  A value is either pending (made by a
// node of the graph) or holds data on the backend device.
#include <volt/jit/lazy/lazy.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <list>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/executor.h>
#include <volt/jit/fusion.h>
#include <volt/jit/kernel_cache.h>
#include <volt/jit/lazy/describe.h>
#include <volt/jit/lazy/runner.h>
#include <volt/jit/passes.h>
#include <volt/jit/report.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/random.h>

namespace volt::lazy {

namespace {

struct Node;

struct LazyValue {
  TensorMeta meta;             // shape and dtype; the device is the lazy device
  std::shared_ptr<Node> node;  // the producer while pending; null once `data` is set
  int output = 0;              // which output of `node`
  Tensor data;                 // on the backend device
  // Or, once its graph was handed to the step runner (mark_step), output
  // `run_index` of that run: `data` is taken from it when the value is read.
  std::shared_ptr<detail::Run> run;
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
};

enum class Reason { ValueNeeded, MarkStep, SizeLimit, Fallback };
const char* reason_name(Reason r) {
  switch (r) {
    case Reason::ValueNeeded: return "value_needed";
    case Reason::MarkStep: return "mark_step";
    case Reason::SizeLimit: return "size_limit";
    case Reason::Fallback: return "fallback";
  }
  return "?";
}

// A compiled graph: its traces (the last one runs) and the names they print with.
struct Entry {
  std::string key;
  std::shared_ptr<jit::ProxyNames> names;
  std::vector<jit::Trace> traces;
};

using Clock = std::chrono::steady_clock;
int64_t us_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

Device backend_from_env() {
  const char* e = std::getenv("VOLT_LAZY_BACKEND");
  if (!e || !*e) return kCPU;
  std::string s = e;
  VOLT_CHECK(s == "cpu" || s == "cuda", "VOLT_LAZY_BACKEND", "expected cpu or cuda, got '" << s << "'");
  VOLT_CHECK(s == "cpu" || cuda::is_available(), "VOLT_LAZY_BACKEND",
             "cuda is not available (no CUDA backend in this build, or no GPU); use cpu");
  return s == "cpu" ? kCPU : Device::cuda(0);
}

std::set<std::string> fallback_from_env() {
  std::set<std::string> r;
  const char* e = std::getenv("VOLT_LAZY_FORCE_FALLBACK");
  if (!e) return r;
  std::stringstream ss(e);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) r.insert(name);
  return r;
}

bool async_from_env() {
  const char* e = std::getenv("VOLT_LAZY_ASYNC");
  if (!e || !*e) return true;
  std::string s = e;
  VOLT_CHECK(s == "0" || s == "1", "VOLT_LAZY_ASYNC", "expected 0 or 1, got '" << s << "'");
  return s == "1";
}

struct State {
  Device backend = backend_from_env();
  bool async = async_from_env();
  std::set<std::string> forced_fallback = fallback_from_env();
  size_t size_limit = 100000;
  size_t pending_nodes = 0;  // recorded since the last graph of every live tensor ran

  std::vector<std::weak_ptr<LazyTensor>> live;  // every lazy tensor made, pruned now and then
  size_t live_after_prune = 0;

  size_t cache_capacity = 1024;
  std::list<std::shared_ptr<Entry>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::shared_ptr<Entry>>::iterator> cache;
  std::shared_ptr<Entry> last_compiled;
  detail::GraphDesc last_desc;  // the last compiled graph in words
  std::string last_reason;      // why it was compiled

  std::map<std::string, int64_t> counters;
  int64_t nodes_recorded = 0;  // kept apart: bumped on every op
};

State& S() {
  static State s;
  return s;
}

void count(const std::string& name, int64_t by = 1) { S().counters[name] += by; }

// Constructed after State (first used by a run), so destroyed before it: its
// destructor lets queued runs finish while everything they use still exists.
detail::Runner& runner() {
  S();
  static detail::Runner r;
  return r;
}

// ------------------------------------------------------------ tensors and values

std::shared_ptr<LazyTensor> state_of(const Tensor& t) {
  auto st = std::static_pointer_cast<LazyTensor>(t.impl()->backend_state);
  VOLT_CHECK(st != nullptr && st->value, "lazy", "tensor " << t.meta_str() << " has no lazy value");
  return st;
}

void prune_live() {
  State& s = S();
  auto& v = s.live;
  v.erase(std::remove_if(v.begin(), v.end(), [](const std::weak_ptr<LazyTensor>& w) { return w.expired(); }),
          v.end());
  s.live_after_prune = v.size();
}

// A new lazy tensor holding `value`.
Tensor wrap(ValuePtr value, std::shared_ptr<LazyTensor> st = nullptr) {
  Tensor t = Tensor::proxy(value->meta.sizes, value->meta.dtype, kLazy);
  if (!st) st = std::make_shared<LazyTensor>();
  st->value = std::move(value);
  State& s = S();
  s.live.push_back(st);
  if (s.live.size() > 2 * s.live_after_prune + 4096) prune_live();
  t.impl()->backend_state = std::move(st);
  return t;
}

uint64_t mix(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }
uint64_t hash_meta(uint64_t h, const TensorMeta& m) {
  h = mix(h, static_cast<uint64_t>(m.dtype));
  for (int64_t d : m.sizes) h = mix(h, static_cast<uint64_t>(d));
  return mix(h, m.sizes.size());
}
uint64_t leaf_hash(const TensorMeta& m) { return hash_meta(101, m); }

ValuePtr data_value(Tensor data) {
  auto v = std::make_shared<LazyValue>();
  v->meta = {data.sizes(), data.dtype(), kLazy};
  v->hash = leaf_hash(v->meta);
  v->data = std::move(data);
  return v;
}

// A copy on the backend device that no one else can write to.
Tensor own_copy(const Tensor& t) {
  Device dev = S().backend;
  return t.device() == dev ? t.clone() : t.to(dev);
}

ValuePtr current(LazyTensor& st);

// The value an op argument stands for: a lazy tensor's, or a zero-dim CPU
// tensor taken in as data (PyTorch lets those join any device).
ValuePtr value_of(const Tensor& t) {
  if (t.device().is_lazy()) return current(*state_of(t));
  VOLT_CHECK(t.dim() == 0 && t.has_data(), "lazy",
             "expected lazy tensors or zero-dim CPU tensors, got " << t.meta_str());
  return data_value(own_copy(t));
}

// ------------------------------------------------------------ graphs and keys

void append_int(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}
void append_double(std::string& s, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  append_int(s, static_cast<int64_t>(bits));
}
void append_meta(std::string& s, const TensorMeta& m) {
  s += dtype_name(m.dtype);
  s += '[';
  for (int64_t d : m.sizes) append_int(s, d), s += ',';
  s += ']';
}

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

struct GraphBuilder {
  Graph g;
  std::unordered_map<const LazyValue*, int64_t> leaf_index;
  std::unordered_map<const Node*, int64_t> node_index;

  void ref(const ValuePtr& v) {
    if (v->node) {
      g.key += 'n';
      append_int(g.key, node_index.at(v->node.get()));
      g.key += '.';
      append_int(g.key, v->output);
    } else {
      auto [it, fresh] = leaf_index.emplace(v.get(), static_cast<int64_t>(g.leaves.size()));
      if (fresh) {
        g.leaves.push_back(v);
        g.key += "L:";
        append_meta(g.key, v->meta);
        g.key += ';';
      }
      g.key += 'l';
      append_int(g.key, it->second);
    }
  }

  // Leaves are declared where first used, so a node's leaf operands are named before it.
  void declare_leaves(const Node* n) {
    for (const Operand& o : n->operands)
      if (o.kind == Operand::Value && !o.value->node && !leaf_index.count(o.value.get())) {
        leaf_index.emplace(o.value.get(), static_cast<int64_t>(g.leaves.size()));
        g.leaves.push_back(o.value);
        g.key += "L:";
        append_meta(g.key, o.value->meta);
        g.key += ';';
      }
  }

  void emit(Node* n) {
    declare_leaves(n);
    node_index.emplace(n, static_cast<int64_t>(g.nodes.size()));
    g.nodes.push_back(n);
    g.key += op_name(n->op);
    g.key += '(';
    for (const Operand& o : n->operands) {
      switch (o.kind) {
        case Operand::Value: ref(o.value); break;
        case Operand::Undefined: g.key += 'u'; break;
        case Operand::Scalar:
          if (o.runtime) {
            g.scalars.push_back(&o);
            g.key += 's';
            g.key += dtype_name(o.runtime_dtype);
          } else {
            g.key += 'c';
            append_int(g.key, static_cast<int>(o.scalar.kind));
            g.key += ':';
            append_double(g.key, o.scalar.value);
          }
          break;
      }
      g.key += ',';
    }
    const Attrs& a = n->attrs;
    g.key += ")[";
    for (int64_t i : a.ints) append_int(g.key, i), g.key += ',';
    g.key += ']';
    append_double(g.key, a.a);
    g.key += ',';
    append_double(g.key, a.b);
    g.key += ',';
    g.key += dtype_name(a.dtype);
    g.key += a.flag ? 'T' : 'F';
    if (op_info(n->op).kind == OpKind::Random) {
      if (!g.has_rng) {
        g.has_rng = true;
        g.rng = {a.seed, a.offset};
      }
      VOLT_CHECK(a.seed == g.rng.seed, "lazy",
                 "one graph draws random numbers with two seeds (manual_seed was called while "
                 "draws were pending); call volt::lazy::mark_step() before manual_seed()");
      g.key += 'r';
      append_int(g.key, static_cast<int64_t>(a.offset - g.rng.offset));
    }
    g.key += "->";
    for (const TensorMeta& m : n->outputs) append_meta(g.key, m), g.key += ',';
    g.key += ";\n";
  }

  // Iterative post-order from `roots` (graphs can be deeper than the stack).
  void build(const std::vector<ValuePtr>& roots) {
    std::vector<std::pair<Node*, size_t>> stack;
    std::unordered_set<const Node*> seen;
    for (const ValuePtr& r : roots) {
      if (!r->node || !seen.insert(r->node.get()).second) continue;
      stack.push_back({r->node.get(), 0});
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        if (i < n->operands.size()) {
          const Operand& o = n->operands[n->visit_order[i++]];
          if (o.kind == Operand::Value && o.value->node && seen.insert(o.value->node.get()).second)
            stack.push_back({o.value->node.get(), 0});
        } else {
          emit(n);
          stack.pop_back();
        }
      }
    }
    g.roots = roots;
    g.key += 'R';
    for (const ValuePtr& r : roots) ref(r), g.key += ',';
  }
};

// Roots in a canonical order: by structural hash, ties in the order given (the
// order tensors were made).  The live tensors of two steps of one loop were not
// made in the same order (an optimizer's state is made on its first step), but
// their roots sort the same.  Equal hashes in another order can only cost a
// compile, never a wrong result: the key spells out the whole structure.
Graph build_graph(std::vector<ValuePtr> roots) {
  std::stable_sort(roots.begin(), roots.end(),
                   [](const ValuePtr& a, const ValuePtr& b) { return a->hash < b->hash; });
  GraphBuilder b;
  b.build(roots);
  return std::move(b.g);
}


// The graph as a jit trace on the backend device: leaves are inputs d0, d1, ...,
// runtime scalars inputs s0, s1, ..., every node one prim.
jit::Trace lower(const Graph& g, const std::shared_ptr<jit::ProxyNames>& names) {
  Device dev = S().backend;
  jit::ProxyNames& nm = *names;
  jit::Trace t;
  t.names = names;
  t.name = "lazy_graph";
  t.provenance = "lazy graph";
  std::unordered_map<const LazyValue*, Tensor> leaf;
  for (size_t i = 0; i < g.leaves.size(); ++i) {
    const TensorMeta& m = g.leaves[i]->meta;
    Tensor p = nm.make({m.sizes, m.dtype, dev}, names.get(), "d" + std::to_string(i));
    leaf[g.leaves[i].get()] = p;
    t.inputs.push_back(p);
  }
  std::unordered_map<const Operand*, Tensor> scalar;
  for (size_t i = 0; i < g.scalars.size(); ++i) {
    Tensor p = nm.make({{}, g.scalars[i]->runtime_dtype, dev}, names.get(), "s" + std::to_string(i));
    scalar[g.scalars[i]] = p;
    t.inputs.push_back(p);
  }
  std::unordered_map<const Node*, std::vector<Tensor>> outs;
  auto proxy_of = [&](const ValuePtr& v) -> Tensor {
    if (v->node) return outs.at(v->node.get()).at(static_cast<size_t>(v->output));
    return leaf.at(v.get());
  };
  for (Node* n : g.nodes) {
    jit::BoundSymbol b;
    b.call.op = n->op;
    b.call.attrs = n->attrs;
    if (b.call.attrs.device.is_lazy()) b.call.attrs.device = dev;
    if (op_info(n->op).kind == OpKind::Random) {
      // Counters relative to the graph's first draw; the run passes that draw's state.
      b.call.attrs.seed = 0;
      b.call.attrs.offset = n->attrs.offset - g.rng.offset;
      t.rng_total += static_cast<uint64_t>(shape_numel(n->attrs.ints));
    }
    for (const Operand& o : n->operands) {
      if (o.kind == Operand::Value) b.call.args.emplace_back(proxy_of(o.value));
      else if (o.kind == Operand::Undefined) b.call.args.emplace_back(Tensor());
      else if (o.runtime) b.call.args.emplace_back(scalar.at(&o));
      else b.call.args.emplace_back(o.scalar);
    }
    for (const TensorMeta& m : n->outputs) b.outputs.push_back(nm.make({m.sizes, m.dtype, dev}, names.get()));
    outs[n] = b.outputs;
    t.bsyms.push_back(std::move(b));
  }
  for (const ValuePtr& r : g.roots) t.outputs.push_back(proxy_of(r));
  return t;
}

// Lowers and compiles a graph: CSE, then (on the CPU) fusion into generated
// kernels, then delete-last-used.
std::shared_ptr<Entry> compile(const Graph& g) {
  auto t0 = Clock::now();
  auto e = std::make_shared<Entry>();
  e->key = g.key;
  e->names = std::make_shared<jit::ProxyNames>();
  e->traces.push_back(lower(g, e->names));
  e->traces.back().millis = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  e->traces.push_back(jit::dce_cse_pass(e->traces.back()));
  // The jit's pipeline, with its built-in executors (fusion ones first).
  jit::compile_pipeline(e->traces, *e->names, jit::executor_order({}));
  count("Time.compile_us", us_since(t0));
  return e;
}

// A node's attributes in words, named for its kind of op.
std::string attrs_str(const Node& n) {
  const Attrs& a = n.attrs;
  std::ostringstream os;
  const OpKind kind = op_info(n.op).kind;
  if (!a.ints.empty()) {
    os << (n.op == OpId::permute ? "order" : n.op == OpId::narrow ? "dim, start, length"
           : kind == OpKind::Reduce ? "dims" : kind == OpKind::View || kind == OpKind::Random ? "shape"
           : kind == OpKind::Window ? "window" : "ints")
       << "=" << shape_str(a.ints);
  }
  auto sep = [&] { return os.tellp() > 0 ? ", " : ""; };
  if (a.a != 0) os << sep() << "a=" << a.a;
  if (a.b != 0) os << sep() << "b=" << a.b;
  if (kind == OpKind::Convert || kind == OpKind::Random) os << sep() << "dtype=" << dtype_name(a.dtype);
  if (a.flag) os << sep() << (kind == OpKind::Reduce ? "keepdim" : "flag");
  return os.str();
}

// The graph in words, for the compile reason.
detail::GraphDesc describe(const Graph& g) {
  std::unordered_map<const Node*, int64_t> node_index;
  std::unordered_map<const LazyValue*, int64_t> leaf_index;
  for (size_t i = 0; i < g.nodes.size(); ++i) node_index[g.nodes[i]] = static_cast<int64_t>(i);
  for (size_t i = 0; i < g.leaves.size(); ++i) leaf_index[g.leaves[i].get()] = static_cast<int64_t>(i);
  auto value_desc = [&](const ValuePtr& v) {
    detail::OperandDesc d;
    if (v->node) {
      d.kind = detail::OperandDesc::Node;
      d.node = node_index.at(v->node.get());
      d.output = v->output;
    } else {
      d.kind = detail::OperandDesc::Input;
      d.input = leaf_index.at(v.get());
      d.dtype = dtype_name(v->meta.dtype);
      d.shape = shape_str(v->meta.sizes);
    }
    return d;
  };
  detail::GraphDesc desc;
  for (const Node* n : g.nodes) {
    detail::NodeDesc nd;
    nd.op = op_name(n->op);
    for (const Operand& o : n->operands) {
      detail::OperandDesc d;
      if (o.kind == Operand::Value) {
        d = value_desc(o.value);
      } else if (o.kind == Operand::Scalar && o.runtime) {
        d.kind = detail::OperandDesc::RuntimeScalar;
        d.dtype = dtype_name(o.runtime_dtype);
      } else if (o.kind == Operand::Scalar) {
        d.kind = detail::OperandDesc::Constant;
        d.constant = o.scalar.repr();
      }
      nd.operands.push_back(std::move(d));
    }
    nd.attrs = attrs_str(*n);
    for (const TensorMeta& m : n->outputs) nd.outputs.push_back(dtype_name(m.dtype) + shape_str(m.sizes));
    desc.nodes.push_back(std::move(nd));
  }
  for (const ValuePtr& r : g.roots) desc.roots.push_back(value_desc(r).str());
  return desc;
}

std::shared_ptr<Entry> lookup_or_compile(const Graph& g, Reason why) {
  State& s = S();
  if (auto it = s.cache.find(g.key); it != s.cache.end()) {
    count("CachedCompile");
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return *it->second;
  }
  count("UncachedCompile");
  const char* log_env = std::getenv("VOLT_LAZY_LOG");  // read per compile: compiles are rare
  const bool log = log_env && std::string(log_env).find("compile") != std::string::npos;
  detail::GraphDesc desc = describe(g);
  s.last_reason = s.last_compiled ? detail::compile_reason(s.last_desc, desc) : "the first graph";
  s.last_desc = std::move(desc);
  if (log) std::cerr << "volt.lazy: compiling a graph of " << g.nodes.size() << " nodes (" << s.last_reason << ")\n";
  std::shared_ptr<Entry> e = compile(g);
  s.last_compiled = e;
  if (jit::report_enabled()) jit::report_lazy_compile(e->traces, g.key, reason_name(why), g.nodes.size());
  if (s.cache_capacity == 0) return e;
  s.lru.push_front(e);
  s.cache[e->key] = s.lru.begin();
  while (s.cache.size() > s.cache_capacity) {
    s.cache.erase(s.lru.back()->key);
    s.lru.pop_back();
  }
  return e;
}

// A runtime scalar as the zero-dim tensor its trace input expects.
Tensor scalar_tensor(const Operand& o) {
  Tensor t = Tensor::empty({}, o.runtime_dtype, kCPU);
  VOLT_DISPATCH_DTYPE(o.runtime_dtype, [&] { *static_cast<scalar_t*>(t.raw_data()) = static_cast<scalar_t>(o.scalar.value); });
  return S().backend.is_cpu() ? t : t.to(S().backend);
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
void run_graph(std::vector<ValuePtr> values, Reason why) {
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
  const bool async = s.async && s.backend.is_cpu() && (why == Reason::MarkStep || why == Reason::SizeLimit);

  std::vector<detail::Input> inputs;
  inputs.reserve(g.leaves.size() + g.scalars.size());
  for (const ValuePtr& l : g.leaves) {
    if (!async) settle(*l);
    inputs.push_back(input_of(*l));
  }
  for (const Operand* o : g.scalars) inputs.push_back({scalar_tensor(*o), nullptr, 0});
  // The job holds its inputs' tensors (and the runs they come from) until it is
  // done, and the compiled entry; nothing of the graph's nodes.
  detail::Runner::Job job = [e, inputs = std::move(inputs), rng = g.rng, async] {
    std::vector<Tensor> in;
    in.reserve(inputs.size());
    for (const detail::Input& i : inputs) in.push_back(detail::resolve(i));  // an earlier run's error passes on
    NoGradGuard no_grad;
    if (!async) return jit::interpret(e->traces.back(), in, &rng);
    try {
      return jit::interpret(e->traces.back(), in, &rng);
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
  for (const auto& w : s.live)
    if (auto st = w.lock(); st && st->value)
      if (ValuePtr v = current(*st); v->node) values.push_back(std::move(v));
  s.pending_nodes = 0;
  run_graph(std::move(values), why);
}

const Tensor& data_of(const ValuePtr& v, Reason why) {
  if (v->node) run_graph({v}, why);
  settle(*v);
  return v->data;
}

// ------------------------------------------------------------ recording

// Runs an op with no lowering eagerly on the backend device: its lazy inputs
// are computed first, its outputs become new leaves.
std::vector<Tensor> fallback(const OpCall& call) {
  count(std::string("Fallback.") + op_name(call));
  std::vector<ValuePtr> pending;
  for (const Value& v : call.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.device().is_lazy()) pending.push_back(current(*state_of(v.tensor)));
  run_graph(pending, Reason::Fallback);
  OpCall c = call;
  for (Value& v : c.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.device().is_lazy())
      v.tensor = data_of(current(*state_of(v.tensor)), Reason::Fallback);
  if (c.attrs.device.is_lazy()) c.attrs.device = S().backend;
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;  // the caller's grad hook records the op on the lazy outputs
    outs = run_prim(c);
  }
  for (Tensor& o : outs) o = wrap(data_value(o));
  return outs;
}

// Whether a scalar operand can be passed at run time: elementwise ops, where
// a zero-dim tensor of the op's compute dtype gives the same result dtype.
bool lift_scalars(OpId op) {
  OpKind k = op_info(op).kind;
  return k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Ternary;
}

// Heavy operands first (see Node::visit_order).
void order_operands(Node& n) {
  auto heavy = [](const Operand& o) { return o.kind == Operand::Value && o.value->node && o.value->node->heavy; };
  n.heavy = !is_elementwise(n.op);
  for (size_t i = 0; i < n.operands.size(); ++i)
    if (heavy(n.operands[i])) {
      n.heavy = true;
      n.visit_order.push_back(static_cast<uint8_t>(i));
    }
  for (size_t i = 0; i < n.operands.size(); ++i)
    if (!heavy(n.operands[i])) n.visit_order.push_back(static_cast<uint8_t>(i));
}

// The structural hash of a node: what the graph key spells out, folded into 64
// bits (random counters and runtime scalar values left out).
uint64_t node_hash(const Node& n) {
  uint64_t h = mix(static_cast<uint64_t>(n.op), n.outputs.size());
  for (const Operand& o : n.operands) {
    if (o.kind == Operand::Value) h = mix(h, o.value->hash);
    else if (o.kind == Operand::Undefined) h = mix(h, 7);
    else if (o.runtime) h = mix(h, 11 + static_cast<uint64_t>(o.runtime_dtype));
    else h = mix(mix(h, static_cast<uint64_t>(o.scalar.kind)), std::hash<double>{}(o.scalar.value));
  }
  const Attrs& a = n.attrs;
  for (int64_t i : a.ints) h = mix(h, static_cast<uint64_t>(i));
  h = mix(mix(mix(h, std::hash<double>{}(a.a)), std::hash<double>{}(a.b)),
          static_cast<uint64_t>(a.dtype) * 2 + a.flag);
  for (const TensorMeta& m : n.outputs) h = hash_meta(h, m);
  return h;
}

// Gives a node (operands and outputs filled in) its layout and hash, and its output values.
std::vector<ValuePtr> add_node(const std::shared_ptr<Node>& node) {
  State& s = S();
  order_operands(*node);
  const uint64_t h = node_hash(*node);
  ++s.pending_nodes;
  ++s.nodes_recorded;
  std::vector<ValuePtr> values;
  for (size_t i = 0; i < node->outputs.size(); ++i) {
    auto v = std::make_shared<LazyValue>();
    v->meta = node->outputs[i];
    v->node = node;
    v->output = static_cast<int>(i);
    v->hash = mix(h, i);
    values.push_back(std::move(v));
  }
  return values;
}

// The lazy device's handler (tensor/dispatch.h): a prim on lazy tensors becomes a node.
std::vector<Tensor> record(const OpCall& call) {
  State& s = S();
  if (call.op == OpId::custom || (!s.forced_fallback.empty() && s.forced_fallback.count(op_name(call.op))))
    return fallback(call);
  if (s.pending_nodes >= s.size_limit) run_live(Reason::SizeLimit);
  std::vector<TensorMeta> metas = infer_meta(call);
  for (TensorMeta& m : metas) m.device = kLazy;  // a zero-dim CPU operand may come first

  if (call.op == OpId::full || call.op == OpId::arange) {
    // A constant is data, like a scalar operand: the step that first fills the
    // optimizer's state then has the same graph as the steps after it.
    Attrs at = call.attrs;
    at.device = s.backend;
    std::vector<Tensor> outs = run_prim(OpCall{call.op, {}, at});
    return {wrap(data_value(outs.at(0)))};
  }

  auto node = std::make_shared<Node>();
  node->op = call.op;
  node->attrs = call.attrs;
  node->outputs = metas;
  node->operands.reserve(call.args.size());
  const bool lift = lift_scalars(call.op);
  DType cd = lift ? compute_dtype(call) : DType::f32;
  for (size_t i = 0; i < call.args.size(); ++i) {
    const Value& v = call.args[i];
    Operand o;
    if (!v.is_tensor) {
      o.kind = Operand::Scalar;
      o.scalar = v.scalar;
      o.runtime = lift;
      o.runtime_dtype = op_info(call.op).kind == OpKind::Ternary && i == 0 ? DType::b8 : cd;
    } else if (v.tensor.defined()) {
      o.kind = Operand::Value;
      o.value = value_of(v.tensor);
    }
    node->operands.push_back(std::move(o));
  }
  std::vector<ValuePtr> values = add_node(node);
  std::vector<Tensor> outs;
  const Value& a0 = call.args.empty() ? Value(0.0) : call.args[0];
  const bool view = op_info(call.op).kind == OpKind::View && a0.is_tensor && a0.tensor.device().is_lazy();
  for (ValuePtr& v : values) {
    std::shared_ptr<LazyTensor> st;
    if (view) {
      st = std::make_shared<LazyTensor>();
      st->base = state_of(a0.tensor);
      st->base_value = node->operands[0].value;
      st->view_op = call.op;
      st->view_attrs = call.attrs;
    }
    outs.push_back(wrap(std::move(v), std::move(st)));
  }
  return outs;
}

// A view's value now: the view op replayed if its base was written since.
ValuePtr current(LazyTensor& st) {
  if (!st.base) return st.value;
  ValuePtr b = current(*st.base);
  if (b != st.base_value) {
    auto n = std::make_shared<Node>();
    n->op = st.view_op;
    n->attrs = st.view_attrs;
    n->outputs = {st.value->meta};
    Operand o;
    o.kind = Operand::Value;
    o.value = b;
    n->operands.push_back(std::move(o));
    st.value = add_node(n).at(0);
    st.base_value = std::move(b);
  }
  return st.value;
}

double item(const Tensor& t) {
  return data_of(current(*state_of(t)), Reason::ValueNeeded).item_double();
}

// The lazy device's side of Tensor::to and copy_.
class LazyBackend final : public Backend {
 public:
  void* allocate(size_t, int) override {
    VOLT_FAIL("lazy", "lazy tensors hold no memory of their own");
  }
  void deallocate(void*, int) override {}
  void run(const OpCall& call, std::vector<Tensor>&) override {
    VOLT_FAIL(op_name(call.op), "the lazy device records ops; it does not run them");
  }
  void synchronize() override { wait_device_ops(); }

  void copy(const Tensor& dst, const Tensor& src) override {
    if (!dst.device().is_lazy()) {
      // To another device: the value is needed now.
      const Tensor& d = data_of(current(*state_of(src)), Reason::ValueNeeded);
      count("Transfer.to_host");
      if (dst.device() == d.device()) {
        Backend* be = backend_for(dst.device().type);
        be->copy(dst, d);
      } else {
        Tensor h = d.to(dst.device());
        backend_for(dst.device().type)->copy(dst, h);
      }
      return;
    }
    VOLT_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "copy_",
               "lazy copy from " << src.meta_str() << " into " << dst.meta_str());
    auto* st = static_cast<LazyTensor*>(dst.impl()->backend_state.get());
    VOLT_CHECK(!(st && st->base), "copy_",
               "writing in place into a view of a lazy tensor is not supported (its base would not "
               "see the write); write into the base tensor instead");
    ValuePtr v;
    if (src.device().is_lazy()) {
      v = current(*state_of(src));
    } else {
      count("Transfer.to_lazy");
      v = data_value(own_copy(src));
    }
    if (st) {
      st->value = std::move(v);
    } else {
      // A fresh handle from to(kLazy): it gets its state here.
      Tensor w = wrap(std::move(v));
      dst.impl()->backend_state = w.impl()->backend_state;
    }
  }
};

struct Registrar {
  LazyBackend backend;
  Registrar() {
    register_backend(DeviceType::Lazy, &backend);
    set_lazy_handler(&record);
    set_item_resolver(DeviceType::Lazy, &item);
  }
} g_registrar;

}  // namespace

// ------------------------------------------------------------ public API

void mark_step() {
  count("MarkStep");
  run_live(Reason::MarkStep);
}

void wait_device_ops() {
  count("Time.wait_us", runner().wait_all());
  if (std::exception_ptr e = runner().take_error()) std::rethrow_exception(e);
  if (S().backend.is_cpu()) return;
  if (Backend* be = backend_for(S().backend.type)) be->synchronize();
}

void sync(const std::vector<Tensor>& tensors) {
  std::vector<ValuePtr> values;
  for (const Tensor& t : tensors)
    if (t.defined() && t.device().is_lazy()) values.push_back(current(*state_of(t)));
  run_graph(values, Reason::ValueNeeded);
  for (const ValuePtr& v : values) settle(*v);
}

void set_async(bool on) { S().async = on; }
bool async() { return S().async; }

void set_backend(Device device) {
  VOLT_CHECK(device.is_cpu() || device.is_cuda(), "lazy::set_backend",
             "expected cpu or cuda, got " << device.str());
  VOLT_CHECK(device.is_cpu() || cuda::is_available(), "lazy::set_backend",
             "device " << device.str() << " is not available (no CUDA backend in this build, or no GPU)");
  if (device == S().backend) return;
  run_live(Reason::MarkStep);  // pending graphs finish where they were recorded for
  wait_device_ops();
  S().backend = device;
  clear_cache();  // compiled graphs are for one device
}
Device backend() { return S().backend; }

void set_cache_size(size_t entries) {
  State& s = S();
  s.cache_capacity = entries;
  while (s.cache.size() > s.cache_capacity) {
    s.cache.erase(s.lru.back()->key);
    s.lru.pop_back();
  }
}
size_t cache_size() { return S().cache_capacity; }
size_t cache_entries() { return S().cache.size(); }
void clear_cache() {
  S().cache.clear();
  S().lru.clear();
}

void set_graph_size_limit(size_t nodes) {
  VOLT_CHECK(nodes > 0, "lazy::set_graph_size_limit", "expected at least one node");
  S().size_limit = nodes;
}
size_t graph_size_limit() { return S().size_limit; }

void set_forced_fallback(const std::vector<std::string>& op_names) {
  S().forced_fallback = std::set<std::string>(op_names.begin(), op_names.end());
}

static std::vector<ValuePtr> values_for_hash(const std::vector<Tensor>& tensors) {
  std::vector<ValuePtr> v;
  for (const Tensor& t : tensors) {
    VOLT_CHECK(t.defined() && t.device().is_lazy(), "lazy::graph_hash",
               "expected lazy tensors, got " << (t.defined() ? t.meta_str() : std::string("undefined")));
    v.push_back(current(*state_of(t)));
  }
  return v;
}

uint64_t graph_hash(const std::vector<Tensor>& tensors) {
  return jit::hash_string(build_graph(values_for_hash(tensors)).key);
}

std::string dump(const Tensor& t) {
  Graph g = build_graph(values_for_hash({t}));
  auto names = std::make_shared<jit::ProxyNames>();
  std::string s = lower(g, names).str();
  // Runtime scalars are inputs of the graph; show this run's values.
  for (size_t i = 0; i < g.scalars.size(); ++i)
    s += (i ? ", s" : "# runtime scalars: s") + std::to_string(i) + " = " + g.scalars[i]->scalar.repr();
  return g.scalars.empty() ? s : s + "\n";
}

const std::vector<jit::Trace>& last_compiled_traces() {
  static const std::vector<jit::Trace> none;
  return S().last_compiled ? S().last_compiled->traces : none;
}

std::string last_compile_reason() { return S().last_reason; }

bool has_value(const Tensor& t) {
  VOLT_CHECK(t.defined() && t.device().is_lazy(), "lazy::has_value", "expected a lazy tensor");
  return current(*state_of(t))->node == nullptr;
}

namespace metrics {

// The step runner's execution time joins the counters when they are read.
static void absorb_runner_time() {
  if (int64_t us = runner().take_execute_us()) count("Time.execute_us", us);
}

std::vector<std::string> counter_names() {
  absorb_runner_time();
  std::vector<std::string> r;
  for (const auto& [name, v] : S().counters)
    if (v != 0) r.push_back(name);
  if (S().nodes_recorded) r.push_back("NodesRecorded");
  std::sort(r.begin(), r.end());
  return r;
}

int64_t counter_value(const std::string& name) {
  absorb_runner_time();
  if (name == "NodesRecorded") return S().nodes_recorded;
  auto it = S().counters.find(name);
  return it == S().counters.end() ? 0 : it->second;
}

std::string report() {
  std::ostringstream os;
  for (const std::string& n : counter_names()) os << n << ": " << counter_value(n) << "\n";
  return os.str();
}

void reset() {
  runner().take_execute_us();
  S().counters.clear();
  S().nodes_recorded = 0;
}

}  // namespace metrics

}  // namespace volt::lazy
