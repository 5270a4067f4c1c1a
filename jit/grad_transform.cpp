#include <volt/jit/grad_transform.h>

#include <unordered_set>

#include <volt/jit/executor_registry.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

namespace {

// What get_grad and put_grads write to while a transform is traced.
struct Context {
  ProxyNames* names = nullptr;
  std::string op;                                     // for messages
  std::vector<std::pair<Tensor, Tensor>> asked;       // (get_grad's proxy, the forward value)
  std::vector<std::pair<Tensor, Tensor>> put;         // (input, gradient)
};
thread_local Context* g_context = nullptr;

class ContextGuard {
 public:
  explicit ContextGuard(Context* c) : prev_(g_context) { g_context = c; }
  ~ContextGuard() { g_context = prev_; }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  Context* prev_;
};

bool same_call(const OpCall& a, const OpCall& b) {
  if (a.op != b.op || a.attrs.custom != b.attrs.custom || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    const Value &x = a.args[i], &y = b.args[i];
    if (x.is_tensor != y.is_tensor) return false;
    if (x.is_tensor && x.tensor.defined() != y.tensor.defined()) return false;
    if (x.is_tensor && x.tensor.defined() && id_of(x.tensor) != id_of(y.tensor)) return false;
  }
  return true;
}

}  // namespace

Tensor get_grad(const Tensor& forward_value) {
  VOLT_CHECK(g_context, "get_grad", "called outside a grad transform (only the grad pass runs those)");
  VOLT_CHECK(forward_value.defined() && forward_value.impl()->proxy_owner == g_context->names, "get_grad",
             "expects a value the grad transform of " << g_context->op << " computed");
  const Tensor& v = forward_value;
  Tensor g = g_context->names->make({v.sizes(), v.dtype(), v.device()}, g_context->names);
  g_context->asked.emplace_back(g, v);
  return g;
}

void put_grads(const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads) {
  VOLT_CHECK(g_context, "put_grads", "called outside a grad transform (only the grad pass runs those)");
  VOLT_CHECK(inputs.size() == grads.size(), "put_grads",
             "got " << inputs.size() << " inputs and " << grads.size() << " gradients; one gradient per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    VOLT_CHECK(inputs[i].defined(), "put_grads", "input " << i << " is undefined");
    if (!grads[i].defined()) continue;  // no gradient for this input
    VOLT_CHECK(grads[i].sizes() == inputs[i].sizes(), "put_grads",
               "the gradient of input " << i << " of " << g_context->op << " is " << grads[i].meta_str()
                                        << ", the input is " << inputs[i].meta_str());
    g_context->put.emplace_back(inputs[i], grads[i]);
  }
}

ExpandedGradTransform expand_grad_transform(const GradTransformFn& transform, const BoundSymbol& b,
                                            ProxyNames& names) {
  const std::string op = op_name(b.call);
  Context ctx;
  ctx.names = &names;
  ctx.op = op;
  std::vector<Tensor> ret;
  std::vector<BoundSymbol> all;
  {
    ContextGuard guard(&ctx);
    all = record(names, [&] { ret = transform(executor_arguments(b.call)); }, /*flatten=*/false);
  }
  VOLT_CHECK(ret.size() == b.outputs.size(), op,
             "its grad transform returned " << ret.size() << " values; it must return the op's " << b.outputs.size()
                                            << " output(s)");
  ExpandedGradTransform r;
  r.original = b.call;

  // The ops that read a gradient, directly or through another such op.
  std::unordered_set<int64_t> reads_grad;
  for (const auto& [g, v] : ctx.asked) reads_grad.insert(id_of(g));
  for (BoundSymbol& s : all) {
    bool backward = false;
    for (const Tensor& t : tensor_args(s)) backward |= reads_grad.count(id_of(t)) > 0;
    if (backward)
      for (const Tensor& o : s.outputs) reads_grad.insert(id_of(o));
    (backward ? r.backward : r.forward).push_back(std::move(s));
  }

  // The returned values are the op's outputs: rename them so.
  std::unordered_map<int64_t, Tensor> rename;
  std::unordered_set<int64_t> made_forward;
  for (const BoundSymbol& s : r.forward)
    for (const Tensor& o : s.outputs) made_forward.insert(id_of(o));
  for (size_t i = 0; i < ret.size(); ++i) {
    const Tensor& v = ret[i];
    const Tensor& o = b.outputs[i];
    VOLT_CHECK(v.defined() && v.sizes() == o.sizes() && v.dtype() == o.dtype() && v.device() == o.device(), op,
               "its grad transform returned " << (v.defined() ? v.meta_str() : std::string("undefined"))
                                              << " as output " << i << ", the op's output is " << o.meta_str());
    VOLT_CHECK(made_forward.count(id_of(v)), op,
               "output " << i << " of its grad transform must be computed by the transform from the op's inputs "
                            "(not be an input, nor depend on get_grad)");
    rename[id_of(v)] = o;
  }
  for (const auto& [g, v] : ctx.asked) {
    size_t which = ret.size();
    for (size_t i = 0; i < ret.size(); ++i)
      if (id_of(ret[i]) == id_of(v)) which = i;
    VOLT_CHECK(which < ret.size(), op, "its grad transform asked get_grad for a value it does not return");
    r.grad_of.emplace_back(id_of(g), which);
  }
  substitute(r.forward, rename);
  substitute(r.backward, rename);

  std::unordered_set<int64_t> arg_ids;
  for (const Value& v : b.call.args)
    if (v.is_tensor && v.tensor.defined()) arg_ids.insert(id_of(v.tensor));
  for (auto& [input, grad] : ctx.put) {
    VOLT_CHECK(arg_ids.count(id_of(input)), op, "its grad transform put a gradient for a value that is not one of its inputs");
    if (auto it = rename.find(id_of(grad)); it != rename.end()) grad = it->second;
    r.put.emplace_back(input, grad);
  }
  return r;
}

std::vector<Tensor> ExpandedGradTransform::replay_backward(const std::vector<Value>& args,
                                                           const std::vector<Tensor>& output_grads) const {
  std::unordered_map<int64_t, Tensor> value;
  for (const auto& [id, which] : grad_of) value[id] = output_grads.at(which);
  auto now = [&](const Tensor& t) {
    auto it = value.find(id_of(t));
    return it == value.end() ? t : it->second;
  };
  for (const BoundSymbol& s : backward) {
    OpCall c = s.call;
    for (Value& v : c.args)
      if (v.is_tensor && v.tensor.defined()) v.tensor = now(v.tensor);
    std::vector<Tensor> outs = dispatch(std::move(c));
    for (size_t i = 0; i < s.outputs.size() && i < outs.size(); ++i) value[id_of(s.outputs[i])] = outs[i];
  }
  // A value passed twice (a * a) gets the sum of its gradients, at its first position.
  std::vector<Tensor> grads(args.size());
  for (const auto& [input, grad] : put) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_tensor || !args[i].tensor.defined() || id_of(args[i].tensor) != id_of(input)) continue;
      Tensor g = now(grad);
      grads[i] = grads[i].defined() ? add(grads[i], g) : g;
      break;
    }
  }
  return grads;
}

std::vector<BoundSymbol> splice_forward(const std::vector<BoundSymbol>& bsyms,
                                        const std::unordered_map<int64_t, const ExpandedGradTransform*>& by_output) {
  std::vector<BoundSymbol> out;
  for (const BoundSymbol& b : bsyms) {
    const ExpandedGradTransform* e = nullptr;
    if (!b.outputs.empty() && !b.is_fusion())
      if (auto it = by_output.find(id_of(b.outputs[0])); it != by_output.end() && same_call(it->second->original, b.call))
        e = it->second;
    if (e) {
      out.insert(out.end(), e->forward.begin(), e->forward.end());
    } else if (!b.subsymbols.empty()) {
      BoundSymbol c = b;
      c.subsymbols = splice_forward(b.subsymbols, by_output);
      out.push_back(std::move(c));
    } else {
      out.push_back(b);
    }
  }
  return out;
}

}  // namespace volt::jit
