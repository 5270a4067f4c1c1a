#include <volt/jit/tracer.h>

#include <algorithm>
#include <unordered_map>

#include <volt/jit/executor.h>
#include <volt/jit/fusion.h>
#include <volt/jit/passes.h>
#include <volt/tensor/random.h>

namespace volt::jit {

namespace {

class Tracer final : public DispatchMode {
 public:
  Tracer(ProxyNames& names, std::unordered_map<const TensorImpl*, Tensor> substitutes,
         std::vector<Tensor> proxies = {}, std::vector<Tensor> values = {})
      : names_(names),
        substitutes_(std::move(substitutes)),
        proxies_(std::move(proxies)),
        values_(std::move(values)) {
    scopes_.push_back(&top_);
  }

  std::vector<Tensor> run(OpCall& call) override {
    for (Value& v : call.args) {
      if (!v.is_tensor || !v.tensor.defined()) continue;
      if (auto it = substitutes_.find(v.tensor.impl()); it != substitutes_.end()) v.tensor = it->second;
      if (v.tensor.impl()->proxy_owner != &names_)
        VOLT_FAIL(op_name(call.op), "got a tensor that is not an input of the traced function ("
                                        << v.tensor.meta_str()
                                        << "); pass it as an argument instead of capturing it");
    }
    if (!is_prim(call)) {
      BoundSymbol b;
      b.call = call;
      scopes_.push_back(&b.subsymbols);
      std::vector<Tensor> outs = decompose(call);
      scopes_.pop_back();
      b.outputs = outs;
      scopes_.back()->push_back(std::move(b));
      return outs;
    }
    if (op_info(call.op).kind == OpKind::Random) {
      // Counters are relative to the generator state when the program runs.
      call.attrs.offset = rng_total_;
      rng_total_ += static_cast<uint64_t>(shape_numel(call.attrs.ints));
    }
    std::vector<Tensor> outs;
    for (const TensorMeta& m : infer_meta(call)) outs.push_back(names_.make(m, &names_));
    BoundSymbol b;
    b.call = call;
    b.outputs = outs;
    if (scopes_.size() == 1) {
      BoundSymbol top;
      top.call = call;
      top.outputs = outs;
      top.subsymbols = {b};
      top.top_level_prim = true;
      top_.push_back(std::move(top));
    } else {
      scopes_.back()->push_back(std::move(b));
    }
    return outs;
  }

  // Reading a value while tracing: compute it from the real inputs with the ops
  // recorded so far, and record a guard, so that other values trace again.
  double item(const Tensor& t) override {
    VOLT_CHECK(!values_.empty(), "item",
               "reading the value of traced tensor " << names_.name(t) << " (" << t.meta_str()
                                                     << ") is not possible here: no input values are known");
    Trace partial;
    partial.inputs = proxies_;
    partial.bsyms = flatten_to_prims(top_);
    for (size_t i = 1; i < scopes_.size(); ++i) {
      std::vector<BoundSymbol> open = flatten_to_prims(*scopes_[i]);
      partial.bsyms.insert(partial.bsyms.end(), open.begin(), open.end());
    }
    partial.outputs = {t};
    partial = dce_cse_pass(partial);
    for (const BoundSymbol& b : partial.bsyms)
      VOLT_CHECK(op_info(b.call.op).kind != OpKind::Random, "item",
                 "the value of " << names_.name(t) << " depends on random numbers; a trace cannot branch on it");
    double v;
    {
      ModeGuard eager(nullptr);
      NoGradGuard no_grad;
      v = interpret(partial, values_).at(0).item_double();
    }
    guards_.push_back(Guard{partial.bsyms, t, v});
    return v;
  }

  std::vector<Guard> take_guards() { return std::move(guards_); }
  std::vector<BoundSymbol> take() { return std::move(top_); }
  uint64_t rng_total() const { return rng_total_; }

 private:
  ProxyNames& names_;
  std::unordered_map<const TensorImpl*, Tensor> substitutes_;
  std::vector<Tensor> proxies_, values_;  // the trace's inputs and their real values
  std::vector<BoundSymbol> top_;
  std::vector<std::vector<BoundSymbol>*> scopes_;
  std::vector<Guard> guards_;
  uint64_t rng_total_ = 0;
};

}  // namespace

TraceResult trace_function(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                           const std::vector<Tensor>& inputs, const std::vector<std::string>& names,
                           const std::vector<Tensor>& captured,
                           const std::vector<std::string>& captured_names) {
  TraceResult r;
  r.names = std::make_shared<ProxyNames>();
  std::unordered_map<const TensorImpl*, Tensor> substitutes;
  std::vector<Tensor> captured_proxies;
  for (size_t i = 0; i < captured.size(); ++i) {
    const Tensor& c = captured[i];
    Tensor p = r.names->make({c.sizes(), c.dtype(), c.device()}, r.names.get(),
                             i < captured_names.size() ? captured_names[i] : "c_" + std::to_string(i));
    substitutes[c.impl()] = p;
    captured_proxies.push_back(p);
  }
  std::vector<Tensor> proxies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor p = r.names->make({inputs[i].sizes(), inputs[i].dtype(), inputs[i].device()}, r.names.get(),
                             i < names.size() ? names[i] : "t_" + std::to_string(i));
    // The proxy keeps the input's layout, so an executor's checker sees whether
    // it is contiguous (the cache key includes that too).
    p.impl()->strides = inputs[i].strides();
    proxies.push_back(p);
  }
  std::vector<Tensor> all_proxies = captured_proxies, all_values = captured;
  all_proxies.insert(all_proxies.end(), proxies.begin(), proxies.end());
  all_values.insert(all_values.end(), inputs.begin(), inputs.end());
  Tracer tracer(*r.names, std::move(substitutes), all_proxies, all_values);
  std::vector<Tensor> outs;
  {
    ModeGuard guard(&tracer);
    outs = fn(proxies);
  }
  r.trace.inputs = captured_proxies;
  r.trace.inputs.insert(r.trace.inputs.end(), proxies.begin(), proxies.end());
  r.trace.bsyms = tracer.take();
  r.trace.outputs = outs;
  r.trace.rng_total = tracer.rng_total();
  r.trace.guards = tracer.take_guards();
  r.trace.provenance = "tracing";
  return r;
}

// A trace prepared for repeated runs: each step is one executor call, values
// live in a vector indexed by proxy id.
struct Program {
  enum class Kind { Prim, Fusion, Operator };
  struct Step {
    Kind kind;
    BoundSymbol b;
    std::vector<int64_t> args, outs, del;  // proxy ids
  };
  std::vector<Step> steps;
  std::vector<int64_t> inputs, outputs;
  size_t slots = 0;
};

namespace {

std::shared_ptr<const Program> build_program(const Trace& t) {
  auto p = std::make_shared<Program>();
  int64_t max_id = -1;
  auto note = [&](const Tensor& x) {
    max_id = std::max(max_id, id_of(x));
    return id_of(x);
  };
  for (const Tensor& x : t.inputs) p->inputs.push_back(note(x));
  auto add = [&](Program::Kind kind, const BoundSymbol& b) {
    Program::Step s{kind, b, {}, {}, {}};
    for (const Tensor& a : tensor_args(b)) s.args.push_back(note(a));
    for (const Tensor& o : b.outputs) s.outs.push_back(note(o));
    p->steps.push_back(std::move(s));
  };
  for (const BoundSymbol& b : t.bsyms) {
    if (!b.fusion_name.empty() && b.kernel && (b.kernel->fn || !dynamic_cast<const CpuFusionExecutor*>(b.executor))) {
      add(Program::Kind::Fusion, b);
    } else if (dynamic_cast<const OperatorExecutor*>(b.executor)) {
      add(Program::Kind::Operator, b);
    } else {
      for (const BoundSymbol& prim : flatten_to_prims(b.fusion_name.empty() ? std::vector<BoundSymbol>{b} : b.subsymbols))
        add(Program::Kind::Prim, prim);
    }
    for (const Tensor& d : b.del_after) p->steps.back().del.push_back(note(d));
  }
  for (const Tensor& o : t.outputs) p->outputs.push_back(note(o));
  p->slots = static_cast<size_t>(max_id + 1);
  return p;
}

}  // namespace

void prepare(Trace& t) { t.program = build_program(t); }

std::vector<BoundSymbol> record(ProxyNames& names, const std::function<void()>& fn, bool flatten) {
  Tracer tracer(names, {});
  {
    ModeGuard guard(&tracer);
    fn();
  }
  return flatten ? flatten_to_prims(tracer.take()) : tracer.take();
}

std::vector<Tensor> interpret(const Trace& trace, const std::vector<Tensor>& inputs,
                              const PhiloxState* rng_in, PhiloxState* rng_used) {
  VOLT_CHECK(inputs.size() == trace.inputs.size(), trace.name,
             "expected " << trace.inputs.size() << " inputs, got " << inputs.size());
  std::shared_ptr<const Program> prog = trace.program ? trace.program : build_program(trace);
  std::vector<Tensor> regs(prog->slots);
  for (size_t i = 0; i < inputs.size(); ++i) regs[static_cast<size_t>(prog->inputs[i])] = inputs[i];
  PhiloxState rng = rng_in ? *rng_in : trace.rng_total ? rng_reserve(trace.rng_total) : PhiloxState{};
  if (rng_used) *rng_used = rng;
  std::vector<Tensor> args;
  for (const Program::Step& s : prog->steps) {
    args.clear();
    for (int64_t id : s.args) {
      VOLT_CHECK(regs[static_cast<size_t>(id)].defined(), trace.name, "value used before it was computed");
      args.push_back(regs[static_cast<size_t>(id)]);
    }
    std::vector<Tensor> outs;
    if (s.kind == Program::Kind::Fusion) {
      outs = static_cast<const FusionExecutor*>(s.b.executor)->run(s.b, args, rng);
    } else {
      OpCall c = s.b.call;
      size_t k = 0;
      for (Value& v : c.args)
        if (v.is_tensor && v.tensor.defined()) v.tensor = args[k++];
      if (op_info(c.op).kind == OpKind::Random) {
        c.attrs.seed = rng.seed;
        c.attrs.offset += rng.offset;
      }
      if (s.kind == Program::Kind::Operator) {
        const auto* ex = static_cast<const OperatorExecutor*>(s.b.executor);
        outs = ex->run(c);
        VOLT_CHECK(outs.size() == s.outs.size(), ex->name(),
                   op_name(c) << " returned " << outs.size() << " tensors, its trace expects " << s.outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          const Tensor& want = s.b.outputs[i];
          VOLT_CHECK(outs[i].defined() && outs[i].sizes() == want.sizes() && outs[i].dtype() == want.dtype(),
                     ex->name(), op_name(c) << " output " << i << " is "
                                    << (outs[i].defined() ? outs[i].meta_str() : std::string("undefined"))
                                    << " but its like-function says " << want.meta_str());
        }
      } else {
        outs = run_eager(c);
      }
    }
    for (size_t i = 0; i < s.outs.size() && i < outs.size(); ++i) regs[static_cast<size_t>(s.outs[i])] = outs[i];
    for (int64_t id : s.del) regs[static_cast<size_t>(id)] = Tensor();
  }
  std::vector<Tensor> results;
  results.reserve(prog->outputs.size());
  for (int64_t id : prog->outputs) {
    VOLT_CHECK(regs[static_cast<size_t>(id)].defined(), trace.name, "output was never computed");
    results.push_back(regs[static_cast<size_t>(id)]);
  }
  return results;
}

}  // namespace volt::jit
