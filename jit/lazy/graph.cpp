// A graph's post-order and cache key, its lowering to a jit trace, and the
// compiled-graph cache (jit/lazy/internal.h: Graph).
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <unordered_set>

#include <volt/jit/events.h>
#include <volt/jit/executor.h>
#include <volt/jit/lazy/internal.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/log.h>

namespace volt::lazy::detail {

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

// Whether a node's Philox counters belong to the graph: a draw, or attention
// with dropout (its forward draws the mask; its backward draws the same again).
bool uses_rng(const Node* n) {
  return op_info(n->op).kind == OpKind::Random ||
         ((n->op == OpId::scaled_dot_product_attention || n->op == OpId::scaled_dot_product_attention_backward) &&
          n->attrs.b > 0);
}

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
    if (uses_rng(n)) {
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

// A composite node's prims, traced on its proxies as a trace would record
// them: the claim pass offers the node whole to the executors (flash takes
// attention) or opens it into these.
std::vector<jit::BoundSymbol> decomposition_of(const jit::BoundSymbol& b, jit::ProxyNames& names) {
  std::vector<Tensor> results;
  AutocastGuard as_recorded(std::nullopt);  // the node's types were fixed when it was recorded
  std::vector<jit::BoundSymbol> made = jit::record(names, [&] { results = decompose(b.call); }, /*flatten=*/false);
  std::unordered_map<int64_t, Tensor> rename;
  for (size_t i = 0; i < b.outputs.size(); ++i) rename[jit::id_of(results.at(i))] = b.outputs[i];
  jit::substitute(made, rename);
  return made;
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
    if (uses_rng(n)) {
      // Counters relative to the graph's first draw; the run passes that draw's state.
      b.call.attrs.seed = 0;
      b.call.attrs.offset = n->attrs.offset - g.rng.offset;
      if (op_info(n->op).kind == OpKind::Random) t.rng_total += static_cast<uint64_t>(shape_numel(n->attrs.ints));
    }
    for (const Operand& o : n->operands) {
      if (o.kind == Operand::Value) b.call.args.emplace_back(proxy_of(o.value));
      else if (o.kind == Operand::Undefined) b.call.args.emplace_back(Tensor());
      else if (o.runtime) b.call.args.emplace_back(scalar.at(&o));
      else b.call.args.emplace_back(o.scalar);
    }
    for (const TensorMeta& m : n->outputs) b.outputs.push_back(nm.make({m.sizes, m.dtype, dev}, names.get()));
    if (!is_prim(b.call)) b.subsymbols = decomposition_of(b, nm);
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
  AutocastGuard as_recorded(std::nullopt);  // the graph holds its casts (tensor/autocast.h)
  auto e = std::make_shared<Entry>();
  e->key = g.key;
  e->names = std::make_shared<jit::ProxyNames>();
  e->traces.push_back(lower(g, e->names));
  e->traces.back().millis = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  e->traces.push_back(jit::dce_cse_pass(e->traces.back()));
  // The jit's pipeline, with its built-in executors (fusion ones first).
  jit::compile_pipeline(e->traces, *e->names, jit::executor_order({}));
  if (S().backend.is_cpu()) attach_plans(*e, g.leaves.size());
  else attach_replay(*e);
  count("Time.compile_us", us_since(t0));
  return e;
}

std::shared_ptr<Entry> lookup_or_compile(const Graph& g, Reason why) {
  State& s = S();
  if (auto it = s.cache.find(g.key); it != s.cache.end()) {
    count("CachedCompile");
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return *it->second;
  }
  count("UncachedCompile");
  const bool log = log_enabled("lazy");
  detail::GraphDesc desc = describe_graph(g);
  s.last_reason = s.last_compiled ? detail::compile_reason(s.last_desc, desc) : "the first graph";
  s.last_desc = std::move(desc);
  if (log) std::cerr << "volt.lazy: compiling a graph of " << g.nodes.size() << " nodes (" << s.last_reason << ")\n";
  std::shared_ptr<Entry> e = compile(g);
  s.last_compiled = e;
  jit::publish_compile({jit::CompileSource::Lazy, nullptr, nullptr, g.key, reason_name(why), &e->traces, g.nodes.size()});
  if (s.cache_capacity == 0) return e;
  s.lru.push_front(e);
  s.cache[e->key] = s.lru.begin();
  while (s.cache.size() > s.cache_capacity) {
    s.cache.erase(s.lru.back()->key);
    s.lru.pop_back();
  }
  return e;
}

}  // namespace volt::lazy::detail
