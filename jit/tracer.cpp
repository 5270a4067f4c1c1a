#include <volt/jit/tracer.h>

#include <algorithm>
#include <unordered_map>

#include <volt/jit/interpreter.h>
#include <volt/jit/passes.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/random.h>
#include <volt/tensor/scope.h>

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
      // Where its draws start, for an executor that runs it whole (jit/flash_attention.h).
      // Attention's backward draws nothing: its offset is its forward's, whose mask it replays.
      if (call.op != OpId::scaled_dot_product_attention_backward) call.attrs.offset = rng_total_;
      BoundSymbol b;
      b.call = call;
      b.scope = current_scope();
      scopes_.push_back(&b.subsymbols);
      std::vector<Tensor> outs = decompose(call);
      scopes_.pop_back();
      b.outputs = outs;
      scopes_.back()->push_back(std::move(b));
      return outs;
    }
    if (op_info(call.op).kind == OpKind::Random) {
      // Counters are relative to the generator state when the program runs; a
      // draw placed by its caller (tensor/ops.h, uniform_philox) keeps its own.
      const uint64_t n = static_cast<uint64_t>(shape_numel(call.attrs.ints));
      if (call.attrs.rng_slot < 0) call.attrs.offset = rng_total_;
      rng_total_ = std::max(rng_total_, call.attrs.offset + n);
    }
    std::vector<Tensor> outs;
    for (const TensorMeta& m : infer_meta(call)) outs.push_back(names_.make(m, &names_));
    BoundSymbol b;
    b.call = call;
    b.outputs = outs;
    b.scope = current_scope();
    if (scopes_.size() == 1) {
      BoundSymbol top;
      top.call = call;
      top.outputs = outs;
      top.scope = b.scope;
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
  ScopeRecording recording_;  // modules called while tracing say where each line came from
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
  r.trace.names = r.names;
  return r;
}

std::vector<BoundSymbol> record(ProxyNames& names, const std::function<void()>& fn, bool flatten) {
  Tracer tracer(names, {});
  {
    ModeGuard guard(&tracer);
    fn();
  }
  return flatten ? flatten_to_prims(tracer.take()) : tracer.take();
}

}  // namespace volt::jit
