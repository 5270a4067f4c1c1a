#include <volt/jit/grad.h>

#include <chrono>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <volt/autograd/node.h>
#include <volt/autograd/vjp.h>
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

void produced_inside(const BoundSymbol& b, std::unordered_set<int64_t>& ids) {
  for (const BoundSymbol& s : b.subsymbols) {
    for (const Tensor& o : s.outputs) ids.insert(id_of(o));
    produced_inside(s, ids);
  }
}

// Keeps each op whole unless a value made inside it is needed outside (saved
// for backward): then its decomposition takes its place.
std::vector<BoundSymbol> expose(const std::vector<BoundSymbol>& bsyms, const std::unordered_set<int64_t>& need) {
  std::vector<BoundSymbol> out;
  for (const BoundSymbol& b : bsyms) {
    std::unordered_set<int64_t> inner;
    if (!b.top_level_prim) produced_inside(b, inner);
    for (const Tensor& o : b.outputs) inner.erase(id_of(o));
    bool open = false;
    for (int64_t id : inner) open |= need.count(id) > 0;
    if (!open) {
      out.push_back(b);
    } else {
      std::vector<BoundSymbol> sub = expose(b.subsymbols, need);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  }
  return out;
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

}  // namespace

GradTraces grad_pass(const Trace& fwd, ProxyNames& names, const std::vector<bool>& requires_grad,
                     const std::vector<Executor*>& executors) {
  auto t0 = std::chrono::steady_clock::now();
  GradTraces r;
  r.num_outputs = fwd.outputs.size();
  std::vector<BoundSymbol> prims;
  grad_units(fwd.bsyms, executors, prims);
  // Ops with a grad transform: traced once here (jit/grad_transform.h).
  std::vector<ExpandedGradTransform> expanded;
  std::unordered_map<const BoundSymbol*, size_t> expansion_of;
  for (const BoundSymbol& b : prims)
    if (const auto* gt = grad_transform_for(b.call, executors)) {
      expansion_of[&b] = expanded.size();
      expanded.push_back(expand_grad_transform(*gt, b, names));
    }

  // Which values carry a gradient.
  std::unordered_set<int64_t> needs;
  for (size_t i = 0; i < fwd.inputs.size(); ++i)
    if (requires_grad[i]) needs.insert(id_of(fwd.inputs[i]));
  for (const BoundSymbol& b : prims) {
    if (b.call.op != OpId::custom && !autograd::is_differentiable(b.call.op)) continue;
    for (const Value& v : b.call.args)
      if (v.is_tensor && v.tensor.defined() && needs.count(id_of(v.tensor))) {
        for (const Tensor& o : b.outputs)
          if (is_floating(o.dtype())) needs.insert(id_of(o));
        break;
      }
  }

  // Trace the VJP rules in reverse order, summing gradients of reused values.
  std::vector<Tensor> cotangents;
  std::unordered_map<int64_t, Tensor> grads;
  std::vector<ScalarReads> scalar_reads;
  for (const Tensor& o : fwd.outputs) {
    Tensor c = names.make({o.sizes(), o.dtype(), o.device()}, &names, "cotangent" + (fwd.outputs.size() > 1 ? std::to_string(cotangents.size()) : std::string()));
    cotangents.push_back(c);
    grads[id_of(o)] = c;
  }
  std::vector<BoundSymbol> bwd = record(names, [&] {
    for (auto it = prims.rbegin(); it != prims.rend(); ++it) {
      const BoundSymbol& b = *it;
      // The gradients of its outputs; zeros for outputs nothing depends on.
      std::vector<Tensor> gs;
      bool any = false;
      for (const Tensor& o : b.outputs) {
        auto g = grads.find(id_of(o));
        bool has = needs.count(id_of(o)) && g != grads.end() && g->second.defined();
        gs.push_back(has ? g->second : Tensor());
        any |= has;
      }
      if (!any) continue;
      std::vector<Tensor> in_grads;
      auto expansion = expansion_of.find(&b);
      if (expansion != expansion_of.end() || b.call.op == OpId::custom) {
        for (size_t k = 0; k < gs.size(); ++k)
          if (!gs[k].defined()) gs[k] = full(b.outputs[k].sizes(), 0.0, b.outputs[k].dtype(), b.outputs[k].device());
        if (expansion != expansion_of.end()) {
          in_grads = expanded[expansion->second].replay_backward(b.call.args, gs);
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
      } else {
        ScalarReads reads;
        auto wanted = [&](size_t j) {
          const Value& a = b.call.args[j];
          return a.is_tensor && a.tensor.defined() && needs.count(id_of(a.tensor)) > 0;
        };
        for (size_t i = 0; i < b.call.args.size(); ++i)
          if (!b.call.args[i].is_tensor && autograd::reads_saved_value(b.call, i, wanted))
            reads.read.push_back(b.call.args[i].scalar);
        reads.first = names.size();
        in_grads = autograd::vjp(b.call, gs[0], b.outputs);
        reads.last = names.size();
        if (!reads.read.empty()) scalar_reads.push_back(std::move(reads));
      }
      for (size_t i = 0; i < b.call.args.size() && i < in_grads.size(); ++i) {
        const Value& v = b.call.args[i];
        if (!v.is_tensor || !v.tensor.defined() || !in_grads[i].defined() || !needs.count(id_of(v.tensor)))
          continue;
        Tensor& acc = grads[id_of(v.tensor)];
        acc = acc.defined() ? add(acc, in_grads[i]) : in_grads[i];
      }
    }
  }, /*flatten=*/false);

  Trace bt;
  bt.name = "backward_fn";
  bt.names = fwd.names;
  bt.bsyms = std::move(bwd);
  for (size_t i = 0; i < fwd.inputs.size(); ++i) {
    if (!requires_grad[i]) continue;
    auto g = grads.find(id_of(fwd.inputs[i]));
    Tensor out = g != grads.end() ? g->second : Tensor();
    if (!out.defined()) {
      // An input that no output depends on: its gradient is zero.
      Tensor z;
      auto extra = record(names, [&] { z = full(fwd.inputs[i].sizes(), 0.0, fwd.inputs[i].dtype(), fwd.inputs[i].device()); });
      bt.bsyms.insert(bt.bsyms.end(), extra.begin(), extra.end());
      out = z;
    }
    bt.outputs.push_back(out);
    r.grad_input_index.push_back(static_cast<int>(i));
  }
  bt.inputs = cotangents;  // provisional; DCE first, then the saved list is what remains used
  bt = dce_cse_pass(bt);

  // Rematerialize: regenerate cheap random-derived values in backward.
  std::unordered_map<int64_t, const BoundSymbol*> producer;
  for (const BoundSymbol& b : prims)
    for (const Tensor& o : b.outputs) producer[id_of(o)] = &b;
  std::unordered_map<int64_t, bool> memo;
  std::unordered_set<int64_t> produced_in_bwd;
  for (const Tensor& c : cotangents) produced_in_bwd.insert(id_of(c));
  for (const BoundSymbol& b : bt.bsyms)
    for (const Tensor& o : b.outputs) produced_in_bwd.insert(id_of(o));
  std::vector<BoundSymbol> regen;
  std::unordered_set<int64_t> regen_ids;
  std::function<void(int64_t)> pull = [&](int64_t id) {
    if (regen_ids.count(id)) return;
    const BoundSymbol& b = *producer.at(id);
    for (const Value& v : b.call.args)
      if (v.is_tensor) pull(id_of(v.tensor));
    regen.push_back(b);
    for (const Tensor& o : b.outputs) regen_ids.insert(id_of(o));
  };
  std::vector<Tensor> saved;
  std::unordered_set<int64_t> saved_ids;
  for (const BoundSymbol& b : bt.bsyms)
    for (const Value& v : b.call.args) {
      if (!v.is_tensor || !v.tensor.defined()) continue;
      int64_t id = id_of(v.tensor);
      if (produced_in_bwd.count(id) || saved_ids.count(id) || regen_ids.count(id)) continue;
      if (recomputable(id, producer, memo)) {
        pull(id);
      } else {
        saved.push_back(v.tensor);
        saved_ids.insert(id);
      }
    }
  for (const Tensor& o : bt.outputs)  // a gradient that is a forward value itself
    if (!produced_in_bwd.count(id_of(o)) && !saved_ids.count(id_of(o)) && !regen_ids.count(id_of(o))) {
      saved.push_back(o);
      saved_ids.insert(id_of(o));
    }
  // Each regenerated value goes right before its first use, so the fusion
  // pass puts the regeneration into the same kernel as its consumer.
  {
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
    for (const BoundSymbol& b : bt.bsyms) {
      for (const Value& v : b.call.args)
        if (v.is_tensor && v.tensor.defined()) place(id_of(v.tensor));
      ordered.push_back(b);
    }
    bt.bsyms = std::move(ordered);
  }
  std::map<std::pair<size_t, size_t>, std::string> scalar_name_of;
  name_saved_scalars(bt.bsyms, scalar_reads, scalar_name_of, bt.scalars);
  bt.rng_total = fwd.rng_total;
  bt.inputs = saved;
  bt.inputs.insert(bt.inputs.end(), cotangents.begin(), cotangents.end());
  bt.provenance = "Grad transform and rematerialization";
  bt.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  bt.kind = Trace::Kind::Backward;
  bt.split = saved.size();
  Trace ft = fwd;
  ft.name = "augmented_forward_fn";
  std::unordered_map<int64_t, const ExpandedGradTransform*> by_output;
  for (auto& [unit, k] : expansion_of) by_output[id_of(unit->outputs.front())] = &expanded[k];
  ft.bsyms = expose(expanded.empty() ? fwd.bsyms : splice_forward(fwd.bsyms, by_output), saved_ids);
  ft.kind = Trace::Kind::AugmentedForward;
  ft.scalars = bt.scalars;
  ft.split = fwd.outputs.size();
  ft.outputs.insert(ft.outputs.end(), saved.begin(), saved.end());
  ft.provenance = "Grad transform and rematerialization";
  ft.millis = bt.millis;
  r.forward = std::move(ft);
  r.backward = std::move(bt);
  return r;
}

}  // namespace volt::jit
