#include <volt/jit/step/step_trace.h>

#include <algorithm>
#include <unordered_set>

#include <volt/autograd/node.h>
#include <volt/autograd/vjp.h>
#include <volt/jit/passes.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

namespace {

// A second handle to the value a proxy stands for now: recorded calls keep
// this one, so rebinding the original later (an in-place write) leaves them be.
Tensor snapshot(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& s = *t.impl();
  impl->sizes = s.sizes;
  impl->strides = s.strides;
  impl->offset = s.offset;
  impl->dtype = s.dtype;
  impl->device = s.device;
  impl->proxy_id = s.proxy_id;
  impl->proxy_owner = s.proxy_owner;
  return Tensor(impl);
}

// Whether eager mode would run this composite as one kernel with its own VJP
// rule (cross_entropy; tensor/dispatch.cpp's runs_fused), rather than as its
// parts; and attention, whose rule is one op that the flash executor runs
// tiled (with dropout the rule draws the forward's mask again: the tracer put
// the forward's counters on the recorded call).
bool fused_with_rule(const OpCall& c) {
  if (c.op == OpId::scaled_dot_product_attention) return attention_runs_whole(c);
  if (c.op != OpId::cross_entropy || c.args.size() != 2) return false;
  const Value& l = c.args[0];
  const Value& t = c.args[1];
  return l.is_tensor && t.is_tensor && l.tensor.defined() && t.tensor.defined() && l.tensor.dim() == 2 &&
         l.tensor.sizes()[1] > 0 && is_floating(l.tensor.dtype()) && t.tensor.dim() == 1 &&
         is_integral(t.tensor.dtype());
}

bool any_requires_grad(const OpCall& c) {
  for (const Value& v : c.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.requires_grad()) return true;
  return false;
}

// The eager tape's record (autograd/engine.cpp), on traced values.
void record_node(const OpCall& original, const OpCall& recorded, std::vector<Tensor>& outs) {
  auto node = std::make_shared<autograd::OpNode>();
  node->call.op = recorded.op;
  node->call.attrs = recorded.attrs;
  for (size_t i = 0; i < original.args.size(); ++i) {
    const Value& v = original.args[i];
    node->next.push_back(v.is_tensor ? autograd::edge_for(v.tensor) : autograd::Edge{});
    node->call.args.push_back(recorded.args[i]);
  }
  for (Tensor& o : outs)
    if (is_floating(o.dtype())) autograd::set_history(o, node);
}

// The step tracer: wraps the jit's tracer (the mode set by record()), adds the
// tape and in-place writes, and notes where each section begins.
class StepMode final : public DispatchMode {
 public:
  StepMode(ProxyNames& names, DispatchMode* inner) : names_(names), inner_(inner) {}

  std::vector<Tensor> run(OpCall& call) override {
    // The tape's edges go to the tensors the user's code holds; the recorded
    // call gets snapshots (a composite's parts arrive with those snapshots,
    // which lead back to the originals through original_of_).
    OpCall original = call;
    for (size_t i = 0; i < call.args.size(); ++i) {
      Value& v = call.args[i];
      if (!v.is_tensor || !v.tensor.defined()) continue;
      if (auto it = original_of_.find(v.tensor.impl()); it != original_of_.end()) original.args[i].tensor = it->second;
      if (v.tensor.impl()->proxy_owner == &names_) {
        Tensor snap = snapshot(v.tensor);
        snap.impl()->requires_grad = v.tensor.requires_grad();
        original_of_[snap.impl()] = original.args[i].tensor;
        v.tensor = snap;
      } else if (v.tensor.has_data() && !v.tensor.requires_grad()) {
        v.tensor = constant(v.tensor);
      }
    }
    const bool grad = grad_enabled() && any_requires_grad(original);
    std::vector<Tensor> outs;
    if (is_prim(call)) {
      outs = handles(inner_->run(call));
      if (grad && (call.op == OpId::custom || autograd::is_differentiable(call.op))) record_node(original, call, outs);
    } else if (grad && fused_with_rule(call)) {
      {
        NoGradGuard no_grad;  // its parts are not taped: its own rule is
        outs = handles(inner_->run(call));
      }
      record_node(original, call, outs);
    } else {
      outs = handles(inner_->run(call));  // its parts come back through run()
    }
    return outs;
  }

  // The user's code gets its own handles to what the trace recorded: an
  // in-place write rebinds the handle (assign below), never the recorded
  // output (a gradient accumulated twice into a leaf: clone, then copy_).
  std::vector<Tensor> handles(std::vector<Tensor> outs) const {
    for (Tensor& o : outs)
      if (o.defined() && o.impl()->proxy_owner == &names_) {
        Tensor h = snapshot(o);
        h.impl()->requires_grad = o.impl()->requires_grad;
        h.impl()->grad_fn = o.impl()->grad_fn;
        h.impl()->output_nr = o.impl()->output_nr;
        h.impl()->is_view = o.impl()->is_view;
        o = h;
      }
    return outs;
  }

  double item(const Tensor& t) override { return inner_->item(t); }

  // A tensor with data made while tracing (a decomposition's arange): an
  // input of the program, passed on every call.
  Tensor constant(const Tensor& t) {
    auto it = constant_of_.find(t.impl());
    if (it != constant_of_.end()) return it->second;
    Tensor p = names_.make({t.sizes(), t.dtype(), t.device()}, &names_, "const" + std::to_string(constants.size()));
    p.impl()->strides = t.strides();
    constants.push_back(t);
    constant_proxies.push_back(p);
    constant_of_[t.impl()] = p;
    return p;
  }
  std::vector<Tensor> constants, constant_proxies;

  bool assign(const Tensor& dst, const Tensor& src) override {
    if (dst.impl()->proxy_owner != &names_ || src.impl()->proxy_owner != &names_) return false;
    dst.impl()->proxy_id = src.impl()->proxy_id;
    dst.impl()->strides = src.strides();
    dst.impl()->offset = src.storage_offset();
    return true;
  }

 private:
  ProxyNames& names_;
  DispatchMode* inner_;
  std::unordered_map<const TensorImpl*, Tensor> constant_of_;
  std::unordered_map<const TensorImpl*, Tensor> original_of_;  // snapshot -> the tensor it was taken of
};

void used_by(const BoundSymbol& b, std::unordered_set<int64_t>& ids) {
  for (const Tensor& a : tensor_args(b)) ids.insert(id_of(a));
}

// The state's own fields, put back when the trace ends (also on an error).
struct Saved {
  std::shared_ptr<TensorImpl> impl;
  TensorImpl fields;
};

class StateSwap {
 public:
  explicit StateSwap(const std::vector<Tensor>& state) {
    for (const Tensor& t : state) saved_.push_back({t.impl_ptr(), *t.impl()});
  }
  ~StateSwap() {
    for (Saved& s : saved_) {
      TensorImpl& i = *s.impl;
      i.storage = s.fields.storage;
      i.strides = s.fields.strides;
      i.offset = s.fields.offset;
      i.proxy_id = -1;
      i.proxy_owner = nullptr;
      i.grad_fn = s.fields.grad_fn;
      i.requires_grad = s.fields.requires_grad;
      i.grad.reset();  // the traced step's zero_grad; a call writes them when asked
    }
  }

 private:
  std::vector<Saved> saved_;
};

}  // namespace

StepTraceResult trace_step(const CompiledStep::Fn& fn, const std::vector<Tensor>& state,
                           const std::vector<std::string>& state_names, const std::vector<Tensor>& args,
                           bool write_grads) {
  StepTraceResult r;
  r.names = std::make_shared<ProxyNames>();
  ProxyNames& names = *r.names;
  std::vector<Tensor> state_proxies, arg_proxies;
  StateSwap swap(state);
  for (size_t i = 0; i < state.size(); ++i) {
    const Tensor& s = state[i];
    VOLT_CHECK(s.has_data() && !s.device().is_lazy(), "compile_step",
               "state tensor " << i << " (" << s.meta_str() << ") has no data of its own");
    Tensor p = names.make({s.sizes(), s.dtype(), s.device()}, &names,
                          i < state_names.size() ? state_names[i] : "s" + std::to_string(i));
    state_proxies.push_back(p);
  }
  for (size_t i = 0; i < state.size(); ++i) {
    TensorImpl& impl = *state[i].impl();
    impl.storage.reset();
    impl.strides = contiguous_strides(impl.sizes);
    impl.offset = 0;
    impl.proxy_id = id_of(state_proxies[i]);
    impl.proxy_owner = &names;
    impl.grad.reset();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    VOLT_CHECK(args[i].defined(), "compile_step", "argument " << i << " is undefined");
    Tensor p = names.make({args[i].sizes(), args[i].dtype(), args[i].device()}, &names,
                          args.size() == 2 ? (i == 0 ? "x" : "y") : "input" + std::to_string(i));
    arg_proxies.push_back(p);
  }

  std::vector<Tensor> outs, constant_proxies;
  std::vector<BoundSymbol> bsyms = record(names, [&] {
    StepMode mode(names, current_mode());
    ModeGuard guard(&mode);
    outs = fn(arg_proxies);
    r.constants = mode.constants;
    constant_proxies = mode.constant_proxies;
  }, /*flatten=*/false);

  for (size_t k = 0; k < outs.size(); ++k)
    VOLT_CHECK(outs[k].defined() && outs[k].impl()->proxy_owner == &names, "compile_step",
               "output " << k << " of the step is not a value it computed");
  r.trace.inputs = state_proxies;
  r.trace.inputs.insert(r.trace.inputs.end(), arg_proxies.begin(), arg_proxies.end());
  r.trace.inputs.insert(r.trace.inputs.end(), constant_proxies.begin(), constant_proxies.end());
  for (const Tensor& o : outs) r.trace.outputs.push_back(snapshot(o));
  r.num_outputs = outs.size();
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i].impl()->proxy_id != id_of(state_proxies[i])) {
      r.trace.outputs.push_back(snapshot(state[i]));
      r.updated_state.push_back(i);
    }
  std::vector<int64_t> grad_ids;
  for (size_t i = 0; i < state.size(); ++i)
    if (const auto& g = state[i].impl()->grad; g && g->proxy_owner == &names) {
      grad_ids.push_back(g->proxy_id);
      if (write_grads) {
        r.trace.outputs.push_back(snapshot(Tensor(g)));
        r.grad_of.push_back(i);
      }
    }
  {
    std::unordered_set<int64_t> used;
    for (const BoundSymbol& b : bsyms) used_by(b, used);
    for (const Tensor& o : r.trace.outputs) used.insert(id_of(o));
    // A bound symbol's arguments are made before it, never inside it: every
    // inner value in `used` is read from outside its op.
    r.trace.bsyms = expose(bsyms, used, /*wrap_prims=*/true);
  }
  for (const BoundSymbol& p : flatten_to_prims(r.trace.bsyms))
    if (op_info(p.call.op).kind == OpKind::Random)
      r.trace.rng_total = std::max<uint64_t>(r.trace.rng_total, p.call.attrs.offset +
                                                                    static_cast<uint64_t>(shape_numel(p.call.attrs.ints)));
  r.trace.provenance = "Tracing the training step";
  r.trace.names = r.names;

  // Sections, by the top-level bound symbols: backward begins right after the
  // loss is made (with the seed of backward()); optimizer after the last one
  // a gradient depends on; loss at the first op reading the target (an
  // argument after the first), else after the last use of a parameter.
  const std::vector<BoundSymbol>& b = r.trace.bsyms;
  std::unordered_map<int64_t, size_t> producer;
  for (size_t i = 0; i < b.size(); ++i)
    for (const Tensor& o : b[i].outputs) producer[id_of(o)] = i;
  auto made_at = [&](int64_t id) -> std::ptrdiff_t {
    auto it = producer.find(id);
    return it == producer.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
  };
  const std::ptrdiff_t loss_at = outs.empty() ? -1 : made_at(id_of(outs[0]));
  std::unordered_set<int64_t> grad_params;
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i].requires_grad()) grad_params.insert(id_of(state_proxies[i]));
  size_t loss_begin = 0, backward_begin = b.size(), optimizer_begin = b.size();
  for (size_t i = 0; i < b.size() && static_cast<std::ptrdiff_t>(i) <= loss_at; ++i)
    for (const Tensor& a : tensor_args(b[i]))
      if (grad_params.count(id_of(a))) loss_begin = i + 1;
  // With a target among the arguments (any after the first), the loss begins
  // at the first op reading it.
  std::unordered_set<int64_t> targets;
  for (size_t i = 1; i < arg_proxies.size(); ++i) targets.insert(id_of(arg_proxies[i]));
  for (size_t i = 0; i < b.size() && static_cast<std::ptrdiff_t>(i) <= loss_at && !targets.empty(); ++i) {
    bool reads = false;
    for (const Tensor& a : tensor_args(b[i])) reads = reads || targets.count(id_of(a)) > 0;
    if (reads) {
      loss_begin = i;
      break;
    }
  }
  backward_begin = static_cast<size_t>(loss_at + 1);
  // The last bound symbol a gradient depends on.
  std::unordered_set<int64_t> needed(grad_ids.begin(), grad_ids.end());
  size_t last_grad = backward_begin;
  for (size_t i = b.size(); i-- > backward_begin;) {
    bool feeds = false;
    for (const Tensor& o : b[i].outputs) feeds |= needed.count(id_of(o)) > 0;
    if (!feeds) continue;
    last_grad = std::max(last_grad, i + 1);
    for (const Tensor& a : tensor_args(b[i])) needed.insert(id_of(a));
  }
  optimizer_begin = grad_ids.empty() ? backward_begin : last_grad;
  loss_begin = std::min(loss_begin, backward_begin);
  for (size_t i = 0; i < b.size(); ++i) {
    StepSection s = i < loss_begin         ? StepSection::Forward
                    : i < backward_begin   ? StepSection::Loss
                    : i < optimizer_begin  ? StepSection::Backward
                                           : StepSection::Optimizer;
    for (const BoundSymbol& p : flatten_to_prims({b[i]}))
      for (const Tensor& o : p.outputs) r.section_of[id_of(o)] = s;
    for (const Tensor& o : b[i].outputs) r.section_of[id_of(o)] = s;
  }
  return r;
}

}  // namespace volt::jit
