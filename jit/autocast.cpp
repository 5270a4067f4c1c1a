#include <volt/jit/autocast.h>

#include <unordered_map>

#include <volt/jit/passes.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/scope.h>

namespace volt::jit {

Trace autocast_pass(const Trace& t, ProxyNames& names, DType low) {
  check_autocast_dtype(low, "autocast");
  auto t0 = Clock::now();
  std::unordered_map<int64_t, Tensor> now;  // a value of `t`, by id -> its value in the new trace
  auto current = [&](const Tensor& x) {
    auto it = now.find(id_of(x));
    return it == now.end() ? x : it->second;
  };
  Trace r = t;
  r.bsyms = record(names, [&] {
    ScopeRecording scopes;
    AutocastGuard on(low);
    for (const BoundSymbol& b : t.bsyms) {
      VOLT_CHECK(!b.is_fusion(), "autocast", "the transform runs on ops, before fusion, not on " << b.fusion_name);
      OpCall call = b.call;
      for (Value& v : call.args)
        if (v.is_tensor && v.tensor.defined()) v.tensor = current(v.tensor);
      ScopeGuard scope(b.scope);
      std::vector<Tensor> outs = dispatch(call);
      VOLT_CHECK(outs.size() == b.outputs.size(), op_name(b.call.op),
                 "gave " << outs.size() << " outputs under autocast, " << b.outputs.size() << " without");
      for (size_t i = 0; i < outs.size(); ++i) now[id_of(b.outputs[i])] = outs[i];
    }
  }, /*flatten=*/false);
  for (Tensor& o : r.outputs) o = current(o);
  r.provenance = std::string("Autocast transform (") + dtype_name(low) + ")";
  r.millis = ms_since(t0);
  return r;
}

JitFunction autocast(const JitFunction& f, DType low) {
  check_autocast_dtype(low, "autocast");
  return f.with_autocast(low);
}

}  // namespace volt::jit
