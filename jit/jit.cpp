#include "jit/jit.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "autograd/node.h"
#include "jit/fusion.h"
#include "jit/grad.h"
#include "jit/passes.h"
#include "jit/tracer.h"

namespace volt::jit {

std::string proxy_name_for(const std::string& dotted) {
  std::string r = "_";
  for (char c : dotted) r += c == '.' ? '_' : c;
  return r;
}

JitFunction::JitFunction(Fn fn, std::vector<std::string> input_names, std::vector<Tensor> captured,
                         std::vector<std::string> captured_names, std::function<bool()> training_flag)
    : fn_(std::move(fn)),
      input_names_(std::move(input_names)),
      captured_(std::move(captured)),
      captured_names_(std::move(captured_names)),
      training_(std::move(training_flag)) {}

// Everything a trace depends on besides values: metadata of every input and
// parameter, the training flag, grad mode.
std::string JitFunction::key_for(const std::vector<Tensor>& args) const {
  std::ostringstream os;
  auto add = [&](const char* what, size_t i, const Tensor& t) {
    os << what << i << "=" << t.meta_str() << (t.requires_grad() ? ",grad" : "") << ";";
  };
  for (size_t i = 0; i < args.size(); ++i) add("input", i, args[i]);
  for (size_t i = 0; i < captured_.size(); ++i) add("param", i, captured_[i]);
  os << "training=" << (training_ ? training_() : false) << ";grad_mode=" << grad_enabled();
  return os.str();
}

static std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string fa, fb;
  while (std::getline(sa, fa, ';') && std::getline(sb, fb, ';'))
    if (fa != fb) return fb + " (was " + fa + ")";
  return "a different number of inputs";
}

std::vector<Tensor> JitFunction::operator()(const std::vector<Tensor>& args) {
  std::string key = key_for(args);
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++hits_;
    last_ = it->second;
  } else {
    ++misses_;
    miss_reason_ = last_key_.empty() ? "first call" : first_difference(last_key_, key);
    static const bool log = [] {
      const char* e = std::getenv("VOLT_JIT_LOG");
      return e && std::string(e).find("recompile") != std::string::npos;
    }();
    if (log) std::cerr << "volt.jit: compiling (" << miss_reason_ << ")\n";
    if (misses_ == 9)
      std::cerr << "volt.jit: warning: this function was compiled 9 times; inputs whose shapes, "
                   "dtypes or requires_grad keep changing defeat the cache (last change: "
                << miss_reason_ << ")\n";
    auto t0 = std::chrono::steady_clock::now();
    TraceResult tr = trace_function(fn_, args, input_names_, captured_, captured_names_);
    tr.trace.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto e = std::make_shared<Entry>();
    e->names = tr.names;
    e->traces.push_back(tr.trace);
    e->traces.push_back(decompose_pass(e->traces.back()));
    e->traces.push_back(dce_cse_pass(e->traces.back()));
    e->num_outputs = e->traces.back().outputs.size();
    std::vector<bool> needs_grad;
    bool any = false;
    for (const Tensor& t : captured_) needs_grad.push_back(t.requires_grad());
    for (const Tensor& t : args) needs_grad.push_back(t.requires_grad());
    for (bool b : needs_grad) any |= b;
    if (grad_enabled() && any && e->num_outputs == 1) {
      GradTraces g = grad_pass(e->traces.back(), *e->names, needs_grad);
      e->traces.push_back(std::move(g.forward));
      e->backward_traces.push_back(std::move(g.backward));
      e->grad_input_index = std::move(g.grad_input_index);
    }
    // Fusion bypasses the eager tape, so it runs where the gradient comes
    // from the backward trace, or where no gradient is needed.
    if (!e->backward_traces.empty() || !(grad_enabled() && any)) {
      for (std::vector<Trace>* list : {&e->traces, &e->backward_traces}) {
        if (list->empty()) continue;
        Trace fused = fusion_pass(list->back());
        auto c0 = std::chrono::steady_clock::now();
        compile_fusions(fused);
        fused.millis += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
        list->push_back(std::move(fused));
        list->push_back(del_last_used_pass(list->back()));
      }
    }
    cache_[key] = e;
    last_ = e;
  }
  last_key_ = key;
  std::vector<Tensor> inputs = captured_;
  inputs.insert(inputs.end(), args.begin(), args.end());
  if (!last_->backward_traces.empty()) return run_with_grad(last_, inputs);
  return interpret(last_->traces.back(), inputs);
}

namespace {

// The autograd node of a jitted call: runs the backward trace on what the
// augmented forward saved, with the forward's random counters.
struct JitNode final : autograd::Node {
  std::shared_ptr<const Trace> backward;
  std::vector<Tensor> saved;
  PhiloxState rng;

  std::vector<Tensor> apply(const Tensor& grad_out) override {
    VOLT_CHECK(!released, "backward",
               "trying to backward through a jitted call a second time; its saved tensors were "
               "freed. Pass retain_graph=true the first time");
    std::vector<Tensor> in = saved;
    in.push_back(grad_out);
    return interpret(*backward, in, &rng);
  }
  std::string name() const override { return "JitBackward"; }
  void release() override {
    released = true;
    saved.clear();
  }
};

}  // namespace

std::vector<Tensor> JitFunction::run_with_grad(const std::shared_ptr<Entry>& e,
                                               const std::vector<Tensor>& inputs) {
  PhiloxState used;
  std::vector<Tensor> all;
  {
    NoGradGuard no_grad;  // the backward trace replaces the eager tape
    all = interpret(e->traces.back(), inputs, nullptr, &used);
  }
  auto node = std::make_shared<JitNode>();
  node->backward = std::make_shared<const Trace>(e->backward_traces.back());
  node->saved.assign(all.begin() + static_cast<std::ptrdiff_t>(e->num_outputs), all.end());
  node->rng = used;
  for (int idx : e->grad_input_index) node->next.push_back(autograd::edge_for(inputs[idx]));
  std::vector<Tensor> outs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(e->num_outputs));
  // Outputs that alias an input (an identity function) get a fresh tensor to hang history on.
  if (outs[0].requires_grad()) outs[0] = outs[0].detach();
  autograd::set_history(outs[0], node);
  return outs;
}

JitFunction::CompileStats JitFunction::compile_stats() const {
  CompileStats st;
  if (!last_) return st;
  for (const std::vector<Trace>* list : {&last_->traces, &last_->backward_traces})
    for (const Trace& t : *list) {
      st.passes.push_back({t.name + ": " + t.provenance, t.millis});
      st.total_ms += t.millis;
      for (const BoundSymbol& b : t.bsyms) st.fusions += b.kernel && &t == &list->back() ? 1 : 0;
    }
  return st;
}

const std::vector<Trace>& JitFunction::last_backward_traces() const {
  static const std::vector<Trace> none;
  return last_ ? last_->backward_traces : none;
}

const std::vector<Trace>& JitFunction::last_traces() const {
  static const std::vector<Trace> none;
  return last_ ? last_->traces : none;
}

}  // namespace volt::jit

namespace volt::jit {

std::vector<std::string> last_kernel_sources(const JitFunction& f) {
  std::vector<std::string> r;
  for (const std::vector<Trace>* list : {&f.last_traces(), &f.last_backward_traces()})
    if (!list->empty())
      for (const BoundSymbol& b : list->back().bsyms)
        if (b.kernel) r.push_back(b.kernel->source);
  return r;
}

}  // namespace volt::jit
