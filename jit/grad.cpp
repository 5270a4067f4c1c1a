#include <volt/jit/grad.h>

#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <volt/autograd/node.h>
#include <volt/autograd/vjp.h>
#include <volt/tensor/scope.h>
#include <volt/jit/executor.h>
#include <volt/jit/grad_transform.h>
#include <volt/jit/passes.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

namespace {

// Whether a forward value can be regenerated in backward from nothing saved:
// it comes from `uniform` through elementwise prims with no tensor inputs besides.
bool recomputable(int64_t id, const std::unordered_map<int64_t, const BoundSymbol*>& producer,
                  std::unordered_map<int64_t, bool>& memo) {
  if (auto it = memo.find(id); it != memo.end()) return it->second;
  auto p = producer.find(id);
  bool ok = false;
  if (p != producer.end()) {
    const BoundSymbol& b = *p->second;
    ok = is_elementwise(b.call.op);
    for (const Value& v : b.call.args)
      if (ok && v.is_tensor) ok = recomputable(id_of(v.tensor), producer, memo);
  }
  memo[id] = ok;
  return ok;
}

// The units the VJP walk differentiates: an op with a grad transform or a
// custom prim as a whole, everything else as its prims.
void grad_units(const std::vector<BoundSymbol>& bsyms, const std::vector<Executor*>& executors,
                std::vector<BoundSymbol>& out) {
  for (const BoundSymbol& b : bsyms) {
    bool whole = b.subsymbols.empty() || grad_transform_for(b.call, executors) ||
                 (b.call.op == OpId::custom && is_prim(b.call));
    if (whole) {
      BoundSymbol u = b;
      u.top_level_prim = false;
      out.push_back(std::move(u));
    } else {
      grad_units(b.subsymbols, executors, out);
    }
  }
}

// The scalars one VJP rule reads from its forward op (mul(t, 1.11)'s 1.11),
// and the proxy ids [first, last) the rule's backward lines define.
struct ScalarReads {
  int64_t first = 0, last = 0;
  std::vector<Scalar> read;
};

// Names the scalars each backward line reads from its forward op: they print
// as f0, f1, ... (the backward unpacks them from C1).  A line belongs to the
// rule whose id range holds its first output; one of its scalar arguments is
// saved when it is the very scalar the rule read.  Appends new ones to `saved`.
void name_saved_scalars(std::vector<BoundSymbol>& bsyms, const std::vector<ScalarReads>& rules,
                        std::map<std::pair<size_t, size_t>, std::string>& name_of,
                        std::vector<NamedScalar>& saved) {
  for (BoundSymbol& b : bsyms) {
    if (!b.outputs.empty()) {
      const int64_t id = id_of(b.outputs.front());
      for (size_t r = 0; r < rules.size(); ++r) {
        if (id < rules[r].first || id >= rules[r].last) continue;
        for (size_t i = 0; i < b.call.args.size(); ++i) {
          const Value& v = b.call.args[i];
          if (v.is_tensor) continue;
          for (size_t k = 0; k < rules[r].read.size(); ++k) {
            const Scalar& s = rules[r].read[k];
            if (s.kind != v.scalar.kind || s.value != v.scalar.value) continue;
            auto [it, fresh] = name_of.try_emplace({r, k}, "f" + std::to_string(saved.size()));
            if (fresh) saved.push_back({it->second, s});
            b.scalar_names.resize(b.call.args.size());
            b.scalar_names[i] = it->second;
            break;
          }
        }
      }
    }
    name_saved_scalars(b.subsymbols, rules, name_of, saved);
  }
}

// ---------------------------------------------------------------- stage 1: the VJP walk

// Ops with a grad transform, traced once (jit/grad_transform.h), by unit.
struct Expansions {
  std::vector<ExpandedGradTransform> expanded;
  std::unordered_map<const BoundSymbol*, size_t> of;
};

Expansions expand_grad_transforms(const std::vector<BoundSymbol>& units, ProxyNames& names,
                                  const std::vector<Executor*>& executors) {
  Expansions x;
  for (const BoundSymbol& b : units)
    if (const auto* gt = grad_transform_for(b.call, executors)) {
      x.of[&b] = x.expanded.size();
      x.expanded.push_back(expand_grad_transform(*gt, b, names));
    }
  return x;
}

// The ids of the values that carry a gradient: the inputs that require one
// and the floating outputs of differentiable units that read such a value.
std::unordered_set<int64_t> values_needing_grad(const Trace& fwd, const std::vector<BoundSymbol>& units,
                                                const std::vector<bool>& requires_grad) {
  std::unordered_set<int64_t> needs;
  for (size_t i = 0; i < fwd.inputs.size(); ++i)
    if (requires_grad[i]) needs.insert(id_of(fwd.inputs[i]));
  for (const BoundSymbol& b : units) {
    if (b.call.op != OpId::custom && !autograd::is_differentiable(b.call.op)) continue;
    for (const Value& v : b.call.args)
      if (v.is_tensor && v.tensor.defined() && needs.count(id_of(v.tensor))) {
        for (const Tensor& o : b.outputs)
          if (is_floating(o.dtype())) needs.insert(id_of(o));
        break;
      }
  }
  return needs;
}

struct VjpWalk {
  std::vector<Tensor> cotangents;               // one per forward output
  std::unordered_map<int64_t, Tensor> grads;    // value id -> its summed gradient
  std::vector<BoundSymbol> bsyms;               // the backward lines, in order
  std::vector<ScalarReads> scalar_reads;        // per VJP rule that reads a forward scalar
};

// The input gradients of a unit run by a grad transform or a custom op's vjp;
// gs: its output gradients, zeros where none.
std::vector<Tensor> replayed_grads(const BoundSymbol& b, std::vector<Tensor> gs, const Expansions& x,
                                   const std::unordered_set<int64_t>& needs) {
  for (size_t k = 0; k < gs.size(); ++k)
    if (!gs[k].defined()) gs[k] = full(b.outputs[k].sizes(), 0.0, b.outputs[k].dtype(), b.outputs[k].device());
  std::vector<Tensor> in_grads;
  if (auto e = x.of.find(&b); e != x.of.end()) {
    in_grads = x.expanded[e->second].replay_backward(b.call.args, gs);
  } else {
    const CustomOpDef& def = custom_op(b.call.attrs.custom);
    VOLT_CHECK(def.vjp, def.name, "has no gradient registered (register it with `grad`)");
    in_grads = def.vjp(b.call.args, gs);
  }
  std::unordered_set<int64_t> given;  // a value passed twice gets its gradient once
  for (size_t i = 0; i < b.call.args.size() && i < in_grads.size(); ++i)
    if (b.call.args[i].is_tensor && b.call.args[i].tensor.defined() && in_grads[i].defined())
      given.insert(id_of(b.call.args[i].tensor));
  for (size_t i = 0; i < b.call.args.size(); ++i) {
    const Value& v = b.call.args[i];
    if (v.is_tensor && v.tensor.defined() && needs.count(id_of(v.tensor)))
      VOLT_CHECK(given.count(id_of(v.tensor)), op_name(b.call),
                 "its grad transform put no gradient for input " << i << " (" << v.tensor.meta_str() << ")");
  }
  return in_grads;
}

// The input gradients of a prim from its VJP rule (autograd/vjp.cpp); notes
// which forward scalars the rule read, for the saved-scalar names.
std::vector<Tensor> rule_grads(const BoundSymbol& b, const Tensor& g, const std::unordered_set<int64_t>& needs,
                               ProxyNames& names, std::vector<ScalarReads>& scalar_reads) {
  ScalarReads reads;
  auto wanted = [&](size_t j) {
    const Value& a = b.call.args[j];
    return a.is_tensor && a.tensor.defined() && needs.count(id_of(a.tensor)) > 0;
  };
  for (size_t i = 0; i < b.call.args.size(); ++i)
    if (!b.call.args[i].is_tensor && autograd::reads_saved_value(b.call, i, wanted))
      reads.read.push_back(b.call.args[i].scalar);
  reads.first = names.size();
  std::vector<Tensor> in_grads = autograd::vjp(b.call, g, b.outputs);
  reads.last = names.size();
  if (!reads.read.empty()) scalar_reads.push_back(std::move(reads));
  return in_grads;
}

// Traces the VJP rules of the units in reverse order, summing the gradients
// of values read more than once.
VjpWalk walk_vjps(const Trace& fwd, const std::vector<BoundSymbol>& units, const Expansions& x,
                  const std::unordered_set<int64_t>& needs, ProxyNames& names) {
  VjpWalk w;
  for (const Tensor& o : fwd.outputs) {
    const std::string suffix = fwd.outputs.size() > 1 ? std::to_string(w.cotangents.size()) : std::string();
    Tensor c = names.make({o.sizes(), o.dtype(), o.device()}, &names, "cotangent" + suffix);
    w.cotangents.push_back(c);
    w.grads[id_of(o)] = c;
  }
  w.bsyms = record(names, [&] {
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
      const BoundSymbol& b = *it;
      // The gradients of its outputs; none for outputs nothing depends on.
      std::vector<Tensor> gs;
      bool any = false;
      for (const Tensor& o : b.outputs) {
        auto g = w.grads.find(id_of(o));
        bool has = needs.count(id_of(o)) && g != w.grads.end() && g->second.defined();
        gs.push_back(has ? g->second : Tensor());
        any |= has;
      }
      if (!any) continue;
      const bool replayed = x.of.count(&b) || b.call.op == OpId::custom;
      ScopeGuard scope(b.scope);  // its backward lines come from where it did
      std::vector<Tensor> in_grads = replayed ? replayed_grads(b, gs, x, needs)
                                              : rule_grads(b, gs[0], needs, names, w.scalar_reads);
      for (size_t i = 0; i < b.call.args.size() && i < in_grads.size(); ++i) {
        const Value& v = b.call.args[i];
        if (!v.is_tensor || !v.tensor.defined() || !in_grads[i].defined() || !needs.count(id_of(v.tensor)))
          continue;
        Tensor& acc = w.grads[id_of(v.tensor)];
        acc = acc.defined() ? add(acc, in_grads[i]) : in_grads[i];
      }
    }
  }, /*flatten=*/false);
  return w;
}

// The backward trace: the walk's lines, returning the gradient of each input
// that requires one (zeros for an input no output depends on).
Trace backward_trace(const Trace& fwd, VjpWalk& w, const std::vector<bool>& requires_grad, ProxyNames& names,
                     std::vector<int>& grad_input_index) {
  Trace bt;
  bt.name = "backward_fn";
  bt.names = fwd.names;
  bt.bsyms = std::move(w.bsyms);
  for (size_t i = 0; i < fwd.inputs.size(); ++i) {
    if (!requires_grad[i]) continue;
    auto g = w.grads.find(id_of(fwd.inputs[i]));
    Tensor out = g != w.grads.end() ? g->second : Tensor();
    if (!out.defined()) {
      const Tensor& in = fwd.inputs[i];
      auto extra = record(names, [&] { out = full(in.sizes(), 0.0, in.dtype(), in.device()); });
      bt.bsyms.insert(bt.bsyms.end(), extra.begin(), extra.end());
    }
    bt.outputs.push_back(out);
    grad_input_index.push_back(static_cast<int>(i));
  }
  bt.inputs = w.cotangents;  // provisional; DCE first, then the saved list is what remains used
  return dce_cse_pass(bt);
}

// ---------------------------------------------------------------- stage 2: the choice of saved values

struct SavedChoice {
  std::vector<Tensor> saved;  // forward values backward reads, in first-use order
  std::unordered_set<int64_t> saved_ids;
  std::vector<BoundSymbol> regen;  // forward lines backward runs again instead (random masks)
};

// Every forward value backward reads is saved, unless it is cheap to make
// again from nothing saved (recomputable): then its producers are regenerated.
SavedChoice choose_saved(const Trace& bt, const std::vector<Tensor>& cotangents,
                         const std::vector<BoundSymbol>& units) {
  std::unordered_map<int64_t, const BoundSymbol*> producer;
  for (const BoundSymbol& b : units)
    for (const Tensor& o : b.outputs) producer[id_of(o)] = &b;
  std::unordered_map<int64_t, bool> memo;
  std::unordered_set<int64_t> produced_in_bwd;
  for (const Tensor& c : cotangents) produced_in_bwd.insert(id_of(c));
  for (const BoundSymbol& b : bt.bsyms)
    for (const Tensor& o : b.outputs) produced_in_bwd.insert(id_of(o));
  SavedChoice r;
  std::unordered_set<int64_t> regen_ids;
  std::function<void(int64_t)> pull = [&](int64_t id) {
    if (regen_ids.count(id)) return;
    const BoundSymbol& b = *producer.at(id);
    for (const Value& v : b.call.args)
      if (v.is_tensor) pull(id_of(v.tensor));
    r.regen.push_back(b);
    for (const Tensor& o : b.outputs) regen_ids.insert(id_of(o));
  };
  auto known = [&](int64_t id) { return produced_in_bwd.count(id) || r.saved_ids.count(id) || regen_ids.count(id); };
  for (const BoundSymbol& b : bt.bsyms)
    for (const Value& v : b.call.args) {
      if (!v.is_tensor || !v.tensor.defined() || known(id_of(v.tensor))) continue;
      if (recomputable(id_of(v.tensor), producer, memo)) {
        pull(id_of(v.tensor));
      } else {
        r.saved.push_back(v.tensor);
        r.saved_ids.insert(id_of(v.tensor));
      }
    }
  for (const Tensor& o : bt.outputs)  // a gradient that is a forward value itself
    if (!known(id_of(o))) {
      r.saved.push_back(o);
      r.saved_ids.insert(id_of(o));
    }
  return r;
}

// ---------------------------------------------------------------- stage 3: rematerialisation

// Each regenerated value goes right before its first use, so the fusion pass
// puts the regeneration into the same kernel as its consumer.
std::vector<BoundSymbol> rematerialize(const std::vector<BoundSymbol>& bsyms, const std::vector<BoundSymbol>& regen) {
  std::unordered_map<int64_t, const BoundSymbol*> regen_of;
  for (const BoundSymbol& b : regen)
    for (const Tensor& o : b.outputs) regen_of[id_of(o)] = &b;
  std::unordered_set<const BoundSymbol*> placed;
  std::vector<BoundSymbol> ordered;
  std::function<void(int64_t)> place = [&](int64_t id) {
    auto it = regen_of.find(id);
    if (it == regen_of.end() || placed.count(it->second)) return;
    for (const Value& v : it->second->call.args)
      if (v.is_tensor) place(id_of(v.tensor));
    placed.insert(it->second);
    ordered.push_back(*it->second);
  };
  for (const BoundSymbol& b : bsyms) {
    for (const Value& v : b.call.args)
      if (v.is_tensor && v.tensor.defined()) place(id_of(v.tensor));
    ordered.push_back(b);
  }
  return ordered;
}

// ---------------------------------------------------------------- stage 4: placement in the forward

// The augmented forward: the forward with grad-transformed ops spliced in and
// ops opened where backward reads a value made inside them; returns the
// outputs, then the saved values.
Trace augmented_forward(const Trace& fwd, const Expansions& x, const SavedChoice& c,
                        const std::vector<NamedScalar>& scalars) {
  Trace ft = fwd;
  ft.name = "augmented_forward_fn";
  std::unordered_map<int64_t, const ExpandedGradTransform*> by_output;
  for (auto& [unit, k] : x.of) by_output[id_of(unit->outputs.front())] = &x.expanded[k];
  ft.bsyms = expose(x.expanded.empty() ? fwd.bsyms : splice_forward(fwd.bsyms, by_output), c.saved_ids,
                    /*wrap_prims=*/false);
  ft.kind = Trace::Kind::AugmentedForward;
  ft.scalars = scalars;
  ft.split = fwd.outputs.size();
  ft.outputs.insert(ft.outputs.end(), c.saved.begin(), c.saved.end());
  ft.provenance = "Grad transform and rematerialization";
  return ft;
}

}  // namespace

GradTraces grad_pass(const Trace& fwd, ProxyNames& names, const std::vector<bool>& requires_grad,
                     const std::vector<Executor*>& executors) {
  auto t0 = Clock::now();
  GradTraces r;
  std::vector<BoundSymbol> units;
  grad_units(fwd.bsyms, executors, units);
  const Expansions x = expand_grad_transforms(units, names, executors);
  const std::unordered_set<int64_t> needs = values_needing_grad(fwd, units, requires_grad);
  VjpWalk walk = walk_vjps(fwd, units, x, needs, names);
  Trace bt = backward_trace(fwd, walk, requires_grad, names, r.grad_input_index);
  const SavedChoice saved = choose_saved(bt, walk.cotangents, units);
  bt.bsyms = rematerialize(bt.bsyms, saved.regen);
  std::map<std::pair<size_t, size_t>, std::string> scalar_name_of;
  name_saved_scalars(bt.bsyms, walk.scalar_reads, scalar_name_of, bt.scalars);
  bt.rng_total = fwd.rng_total;
  bt.inputs = saved.saved;
  bt.inputs.insert(bt.inputs.end(), walk.cotangents.begin(), walk.cotangents.end());
  bt.provenance = "Grad transform and rematerialization";
  bt.millis = ms_since(t0);
  bt.kind = Trace::Kind::Backward;
  bt.split = saved.saved.size();
  r.forward = augmented_forward(fwd, x, saved, bt.scalars);
  r.forward.millis = bt.millis;
  r.backward = std::move(bt);
  return r;
}

}  // namespace volt::jit
