#include "jit/tracer.h"

#include <unordered_map>

#include "jit/fusion.h"
#include "tensor/random.h"

namespace volt::jit {

namespace {

class Tracer final : public DispatchMode {
 public:
  Tracer(ProxyNames& names, std::unordered_map<const TensorImpl*, Tensor> substitutes)
      : names_(names), substitutes_(std::move(substitutes)) {
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
    if (!is_prim(call.op)) {
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

  double item(const Tensor& t) override {
    VOLT_FAIL("item", "reading the value of traced tensor " << names_.name(t) << " ("
                                                            << t.meta_str()
                                                            << ") is not supported by this tracer");
  }

  std::vector<BoundSymbol> take() { return std::move(top_); }
  uint64_t rng_total() const { return rng_total_; }

 private:
  ProxyNames& names_;
  std::unordered_map<const TensorImpl*, Tensor> substitutes_;
  std::vector<BoundSymbol> top_;
  std::vector<std::vector<BoundSymbol>*> scopes_;
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
    proxies.push_back(p);
  }
  Tracer tracer(*r.names, std::move(substitutes));
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
  r.trace.provenance = "tracing";
  return r;
}

namespace {

// One prim on the eager executor, its random draws placed at the program's counters.
template <class Lookup>
void run_one_prim(const BoundSymbol& b, std::unordered_map<int64_t, Tensor>& regs, Lookup& lookup,
                  const PhiloxState& rng) {
  OpCall c = b.call;
  for (Value& v : c.args)
    if (v.is_tensor && v.tensor.defined()) v.tensor = lookup(v.tensor);
  if (op_info(c.op).kind == OpKind::Random) {
    c.attrs.seed = rng.seed;
    c.attrs.offset += rng.offset;
  }
  std::vector<Tensor> outs = run_eager(c);
  for (size_t i = 0; i < outs.size(); ++i) regs[b.outputs[i].impl()->proxy_id] = outs[i];
}

// One fused region: its generated kernel over contiguous buffers, or its prims
// one by one when no kernel could be built.
template <class Lookup>
void run_fusion(const BoundSymbol& f, std::unordered_map<int64_t, Tensor>& regs, Lookup& lookup,
                const PhiloxState& rng) {
  if (!f.kernel || !f.kernel->fn) {
    for (const BoundSymbol& p : f.subsymbols) run_one_prim(p, regs, lookup, rng);
    return;
  }
  std::vector<Tensor> keep;
  std::vector<void*> ptrs;
  for (const Tensor& in : f.fusion_inputs) {
    Tensor x = lookup(in);
    VOLT_CHECK(x.device().is_cpu(), f.fusion_name, "expected CPU tensors, got " << x.meta_str());
    if (!x.is_contiguous()) x = x.contiguous();
    keep.push_back(x);
    ptrs.push_back(x.raw_data());
  }
  std::vector<Tensor> outs;
  for (const Tensor& o : f.outputs) {
    outs.push_back(Tensor::empty(o.sizes(), o.dtype(), o.device()));
    ptrs.push_back(outs.back().raw_data());
  }
  long long n = static_cast<long long>(f.subsymbols.front().outputs.front().numel());
  f.kernel->fn(n, ptrs.data(), rng.seed, rng.offset);
  for (size_t i = 0; i < outs.size(); ++i) regs[f.outputs[i].impl()->proxy_id] = outs[i];
}

}  // namespace

std::vector<BoundSymbol> record(ProxyNames& names, const std::function<void()>& fn) {
  Tracer tracer(names, {});
  {
    ModeGuard guard(&tracer);
    fn();
  }
  return flatten_to_prims(tracer.take());
}

std::vector<Tensor> interpret(const Trace& trace, const std::vector<Tensor>& inputs,
                              const PhiloxState* rng_in, PhiloxState* rng_used) {
  VOLT_CHECK(inputs.size() == trace.inputs.size(), trace.name,
             "expected " << trace.inputs.size() << " inputs, got " << inputs.size());
  std::unordered_map<int64_t, Tensor> regs;
  for (size_t i = 0; i < inputs.size(); ++i) regs[trace.inputs[i].impl()->proxy_id] = inputs[i];
  PhiloxState rng = rng_in ? *rng_in : trace.rng_total ? rng_reserve(trace.rng_total) : PhiloxState{};
  if (rng_used) *rng_used = rng;
  auto lookup = [&](const Tensor& p) -> const Tensor& {
    auto it = regs.find(p.impl()->proxy_id);
    VOLT_CHECK(it != regs.end(), trace.name, "value used before it was computed");
    return it->second;
  };
  for (const BoundSymbol& b : flatten_to_prims(trace.bsyms)) {
    if (!b.fusion_name.empty()) {
      run_fusion(b, regs, lookup, rng);
      for (const Tensor& d : b.del_after) regs.erase(d.impl()->proxy_id);
      continue;
    }
    run_one_prim(b, regs, lookup, rng);
    for (const Tensor& d : b.del_after) regs.erase(d.impl()->proxy_id);
  }
  std::vector<Tensor> results;
  for (const Tensor& o : trace.outputs) results.push_back(lookup(o));
  return results;
}

}  // namespace volt::jit
