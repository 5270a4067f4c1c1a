#include <volt/jit/step/step.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unordered_set>

#include <volt/jit/events.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/step/low_weights.h>
#include <volt/jit/step/memory_plan.h>
#include <volt/jit/passes.h>
#include <volt/jit/step/step_trace.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/log.h>
#ifdef VOLT_WITH_CUDA
#include <volt/jit/cuda/step_graph.h>
#endif

namespace volt::jit {

const char* section_name(StepSection s) {
  switch (s) {
    case StepSection::Forward: return "forward";
    case StepSection::Loss: return "loss";
    case StepSection::Backward: return "backward";
    case StepSection::Optimizer: return "optimizer";
  }
  return "?";
}

struct CompiledStep::Entry {
  std::shared_ptr<ProxyNames> names;
  std::vector<Trace> traces;
  size_t num_outputs = 0;
  std::vector<size_t> updated_state, grad_of;
  std::unordered_map<int64_t, StepSection> section_of;
  double compile_ms = 0;
  std::unique_ptr<MemoryPlan> plan;
  std::vector<Tensor> constants;  // passed after the arguments
  // State indices of the parameters whose low-precision copies are inputs
  // right after the state (jit/step/low_weights.h), and their type.
  std::vector<size_t> low_params;
  DType low = DType::bf16;
  int64_t runs = 0;
  bool graphed = false;  // the last run replayed `graph`
#ifdef VOLT_WITH_CUDA
  std::unique_ptr<cuda::StepGraph> graph;
  std::string graph_refused;  // why a capture failed: the step then runs launch by launch
#endif
};

CompiledStep::CompiledStep(Fn fn, StepOptions options) : fn_(std::move(fn)), options_(std::move(options)) {
  VOLT_CHECK(options_.max_cached_shapes >= 1, "compile_step", "max_cached_shapes must be at least 1");
  if (options_.autocast) check_autocast_dtype(*options_.autocast, "compile_step");
  std::unordered_set<const TensorImpl*> seen;
  std::vector<Tensor> scalars;
  for (const StepState& s : options_.state) {
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const Tensor& t = s.tensors[i];
      VOLT_CHECK(t.defined(), "compile_step", "a state tensor is undefined");
      if (!seen.insert(t.impl()).second) continue;
      state_.push_back(t);
      state_names_.push_back(i < s.names.size() ? s.names[i] : "s" + std::to_string(state_.size() - 1));
    }
    for (const auto& [t, read] : s.scalars) {
      VOLT_CHECK(t.defined() && t.numel() == 1 && read, "compile_step",
                 "a run-time scalar needs a one-element tensor and a function giving its value");
      if (!seen.insert(t.impl()).second) continue;
      scalars.push_back(t);
      refill_.push_back(read);
    }
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    state_.push_back(scalars[i]);
    state_names_.push_back(scalars.size() == 1 ? "lr" : "scalar" + std::to_string(i));
  }
  std::vector<Executor*> user;
  for (Executor& e : options_.jit.executors) user.push_back(&e);
  executors_ = executor_order(user);
}

CompiledStep::~CompiledStep() = default;
CompiledStep::CompiledStep(CompiledStep&&) noexcept = default;

std::string CompiledStep::key_for(const std::vector<Tensor>& args) const {
  std::ostringstream os;
  for (size_t i = 0; i < args.size(); ++i)
    os << "input" << i << "=" << args[i].meta_str() << (args[i].is_contiguous() ? "" : ",strided") << ";";
  for (size_t i = 0; i < state_.size(); ++i)
    os << "state" << i << "=" << state_[i].meta_str() << (state_[i].is_contiguous() ? "" : ",strided")
       << (state_[i].requires_grad() ? ",requires_grad" : "") << ";";
  for (const StepState& s : options_.state)
    if (s.training) os << "training=" << s.training() << ";";
  os << "grad_mode=" << grad_enabled() << ";";
  if (std::optional<DType> low = autocast_now()) os << "autocast=" << dtype_name(*low) << ";";
  return os.str();
}

void CompiledStep::signature(const std::vector<Tensor>& args, std::vector<int64_t>& out) const {
  out.clear();
  auto add = [&](const Tensor& t) {
    out.push_back(static_cast<int64_t>(t.dim()));
    for (int64_t d : t.sizes()) out.push_back(d);
    out.push_back(static_cast<int64_t>(t.dtype()));
    out.push_back(static_cast<int64_t>(t.device().type) * 1024 + t.device().index);
    out.push_back(t.is_contiguous());
  };
  out.push_back(static_cast<int64_t>(args.size()));
  for (const Tensor& a : args) add(a);
  for (const Tensor& s : state_) {
    add(s);
    out.push_back(s.requires_grad());  // a freeze recompiles
  }
  for (const StepState& s : options_.state)
    if (s.training) out.push_back(s.training());
  out.push_back(grad_enabled());
  std::optional<DType> low = autocast_now();
  out.push_back(low ? 1 + static_cast<int64_t>(*low) : 0);
}

std::optional<DType> CompiledStep::autocast_now() const {
  if (options_.autocast) return options_.autocast;
  return options_.jit.autocast ? options_.jit.autocast : autocast_dtype();
}

namespace {

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string fa, fb;
  while (std::getline(sa, fa, ';') && std::getline(sb, fb, ';'))
    if (fa != fb) return fb + " (was " + fa + ")";
  return "a different number of inputs";
}

// Copies are identities of value: their users read the copied value itself,
// unless the copy is an output (it must be a tensor of its own there).
Trace forward_copies_pass(const Trace& t) {
  auto t0 = Clock::now();
  std::unordered_set<int64_t> outputs;
  for (const Tensor& o : t.outputs) outputs.insert(id_of(o));
  std::unordered_map<int64_t, Tensor> source;
  Trace r = t;
  r.bsyms.clear();
  for (const BoundSymbol& b0 : t.bsyms) {
    BoundSymbol b = b0;
    std::vector<BoundSymbol> one{b};
    substitute(one, source);
    b = one.front();
    if (b.call.op == OpId::copy && b.outputs.size() == 1 && b.call.args[0].is_tensor &&
        !outputs.count(id_of(b.outputs[0])) && b.call.args[0].tensor.is_contiguous()) {
      source[id_of(b.outputs[0])] = b.call.args[0].tensor;
      continue;
    }
    r.bsyms.push_back(std::move(b));
  }
  r.provenance = "Forward copies";
  r.millis = ms_since(t0);
  return r;
}

}  // namespace

std::shared_ptr<CompiledStep::Entry> CompiledStep::compile(const std::vector<Tensor>& args,
                                                           std::optional<DType> low) {
  auto t0 = Clock::now();
  StepTraceResult tr = [&] {
    // Autocast acts as each op is traced (tensor/autocast.h): backward() then
    // records the casts' gradients, casts back, with the rest of the step.
    AutocastGuard amp(low);
    return trace_step(fn_, state_, state_names_, args, options_.write_grads);
  }();
  if (low) tr.trace.provenance = std::string("tracing with autocast to ") + dtype_name(*low);
  tr.trace.millis = ms_since(t0);
  auto e = std::make_shared<Entry>();
  e->names = tr.names;
  e->num_outputs = tr.num_outputs;
  e->updated_state = std::move(tr.updated_state);
  e->grad_of = std::move(tr.grad_of);
  e->section_of = std::move(tr.section_of);
  e->constants = std::move(tr.constants);
  e->traces.push_back(std::move(tr.trace));
  e->traces.push_back(forward_copies_pass(e->traces.back()));
  e->traces.push_back(dce_cse_pass(e->traces.back()));
  bool on_cpu = true;
  for (const Tensor& t : state_) on_cpu = on_cpu && t.device().is_cpu();
  if (low && on_cpu) {
    // Each weight's low copy is state, written by the update: no cast in the forward.
    std::vector<bool> cached;
    for (const Tensor& t : state_) cached.push_back(autocast_caches(t) && t.is_contiguous());
    LowWeights lw = low_weights_pass(e->traces.back(), *e->names, state_.size(), e->num_outputs, e->updated_state,
                                     cached);
    if (!lw.params.empty()) {
      e->low_params = std::move(lw.params);
      e->low = *low;
      const size_t first_new = e->num_outputs + e->updated_state.size() - e->low_params.size();
      for (size_t j = 0; j < e->low_params.size(); ++j)
        e->section_of[id_of(lw.trace.outputs[first_new + j])] = StepSection::Optimizer;
      e->traces.push_back(std::move(lw.trace));
    }
  }
  const size_t num_state = state_.size() + e->low_params.size();
  // The jit's pipeline, with the step's collectives and, on the CPU, its arena.
  PipelineOptions pipeline = options_.jit.pipeline;
  pipeline.with.push_back("Place collectives");
  // The optimizer's update in the store of each weight gradient's GEMM (CPU).
  if (!options_.gemm_epilogues) pipeline.without.push_back("GEMM epilogues");
  bool plannable = options_.memory_plan;
  for (const Tensor& t : state_) plannable = plannable && t.device().is_cpu() && t.is_contiguous();
  for (const Tensor& t : args) plannable = plannable && t.device().is_cpu();
  if (plannable)
    pipeline.plan = [&](Trace& t) {
      e->plan = std::make_unique<MemoryPlan>(t, num_state, e->num_outputs, e->updated_state);
    };
  compile_pipeline(e->traces, *e->names, executors_, pipeline);
  for (const Trace& t : e->traces) e->compile_ms += t.millis;
  return e;
}

std::vector<Tensor> CompiledStep::operator()(const std::vector<Tensor>& args) {
  std::lock_guard<std::mutex> lock(*mutex_);
  // The same shapes as the last call (the common case): no key string.
  signature(args, signature_);
  const std::optional<DType> low = autocast_now();
  AutocastGuard as_traced(std::nullopt);  // the program has its casts
  std::shared_ptr<Entry> found;
  std::string key;
  if (last_ && signature_ == last_signature_) {
    found = last_;
    key = std::move(last_key_);
  } else {
    key = key_for(args);
    for (size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].first == key) {
        found = cache_[i].second;
        std::rotate(cache_.begin(), cache_.begin() + static_cast<std::ptrdiff_t>(i),
                    cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1);  // most recently used first
        break;
      }
  }
  if (found) {
    ++hits_;
  } else {
    ++compiles_;
    miss_reason_ = last_key_.empty() ? "first call" : first_difference(last_key_, key);
    if (log_enabled("jit")) std::cerr << "volt.jit: compiling the training step (" << miss_reason_ << ")\n";
    found = compile(args, low);
    cache_.emplace(cache_.begin(), key, found);
    // The least recently used programs go, their arenas with them.
    if (cache_.size() > options_.max_cached_shapes) cache_.resize(options_.max_cached_shapes);
    last_ = found;
    publish_compile({CompileSource::Step, this, nullptr, key, miss_reason_, &found->traces});
  }
  last_ = found;
  last_key_ = std::move(key);
  last_signature_.swap(signature_);

  const size_t first_scalar = state_.size() - refill_.size();
  refilled_.resize(refill_.size(), std::nan(""));
  for (size_t i = 0; i < refill_.size(); ++i) {
    Tensor& t = state_[first_scalar + i];
    const double value = refill_[i]();
    // Only a new value is written (on a GPU, a write is a launch).
    if (value == refilled_[i] && !t.device().is_cpu()) continue;
    refilled_[i] = value;
    // Written in place (fill_ would make a tensor of the value first).
    if (t.device().is_cpu() && t.dtype() == DType::f64 && t.is_contiguous()) *t.data_ptr<double>() = value;
    else if (t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous()) *t.data_ptr<float>() = static_cast<float>(value);
    else t.fill_(value);
  }
  Entry& e = *found;
  e.graphed = false;
#ifdef VOLT_WITH_CUDA
  // A GPU step runs once as it is (kernels compile, the allocator fills its
  // cache), then is captured, then replayed.
  if (!e.plan && options_.cuda_graph && e.graph_refused.empty() &&
      (e.graph || cuda::StepGraph::applies(e.traces.back(), state_, args))) {
    if (!e.graph && e.runs > 0) {
      try {
        e.graph = std::make_unique<cuda::StepGraph>(e.traces.back(), state_, args, e.constants, e.num_outputs,
                                                    e.updated_state);
      } catch (const Error& err) {
        // A driver may refuse a capture that the simulator took; the step is
        // still right launch by launch, only slower, and says so once.
        e.graph_refused = err.what();
        std::cerr << "volt.jit: compile_step runs launch by launch, its CUDA graph capture failed: "
                  << e.graph_refused << "\n";
      }
    }
    if (e.graph) {
      ++e.runs;
      e.graphed = true;
      std::vector<Tensor> outs = e.graph->run(args);
      for (size_t k = 0; k < e.grad_of.size(); ++k) state_[e.grad_of[k]].set_grad(outs[e.num_outputs + k].clone());
      outs.resize(e.num_outputs);
      if (!options_.reuse_outputs)
        for (Tensor& o : outs) o = o.clone();
      return outs;
    }
  }
#endif
  ++e.runs;
  std::vector<Tensor>& inputs = inputs_;
  inputs.assign(state_.begin(), state_.end());
  // The weights' low copies, current with the weights (cast again where a weight was written since).
  for (size_t i : e.low_params) inputs.push_back(autocast_cached_value(state_[i], e.low));
  inputs.insert(inputs.end(), args.begin(), args.end());
  inputs.insert(inputs.end(), e.constants.begin(), e.constants.end());
  std::vector<Tensor> outs;
  if (e.plan) {
    outs = e.plan->run(e.traces.back(), inputs);
  } else {
    NoGradGuard no_grad;
    outs = interpret(e.traces.back(), inputs);
    for (size_t k = 0; k < e.updated_state.size(); ++k) inputs[e.updated_state[k]].copy_(outs[e.num_outputs + k]);
  }
  // The copies hold the cast of the updated weights.
  for (size_t i : e.low_params) autocast_copy_rewritten(state_[i]);
  inputs.clear();  // the arguments are not held past the call
  for (size_t k = 0; k < e.grad_of.size(); ++k)
    state_[e.grad_of[k]].set_grad(outs[e.num_outputs + e.updated_state.size() + k].clone());
  outs.resize(e.num_outputs);
  if (!options_.reuse_outputs)
    for (Tensor& o : outs)
      if (e.plan) o = o.clone();
  return outs;
}

const std::vector<Trace>& CompiledStep::last_traces() const {
  static const std::vector<Trace> none;
  return last_ ? last_->traces : none;
}

size_t CompiledStep::cached_arena_bytes() const {
  size_t bytes = 0;
  for (const auto& [key, e] : cache_)
    if (e->plan) bytes += e->plan->arena_bytes();
  return bytes;
}

double CompiledStep::last_compile_ms() const { return last_ ? last_->compile_ms : 0; }
size_t CompiledStep::arena_bytes() const { return last_ && last_->plan ? last_->plan->arena_bytes() : 0; }
bool CompiledStep::ran_as_graph() const { return last_ && last_->graphed; }
size_t CompiledStep::graph_kernel_nodes() const {
#ifdef VOLT_WITH_CUDA
  if (last_ && last_->graphed) return last_->graph->kernel_nodes();
#endif
  return 0;
}
size_t CompiledStep::graph_memcpy_nodes() const {
#ifdef VOLT_WITH_CUDA
  if (last_ && last_->graphed) return last_->graph->memcpy_nodes();
#endif
  return 0;
}

std::string CompiledStep::last_trace_str() const {
  if (!last_) return {};
  const Trace& t = last_->traces.back();
  // One section per bound symbol, by the first value it makes.
  std::vector<const char*> label;
  for (const BoundSymbol& b : t.bsyms) {
    std::vector<BoundSymbol> parts = !b.is_fusion() ? std::vector<BoundSymbol>{b} : b.subsymbols;
    // A GEMM with the update in its store belongs with the update.
    if (is_gemm_epilogue(b)) parts.erase(parts.begin());
    StepSection s = StepSection::Forward;
    bool found = false;
    for (const BoundSymbol& p : parts) {
      for (const Tensor& o : p.outputs)
        if (auto it = last_->section_of.find(id_of(o)); it != last_->section_of.end()) {
          s = it->second;
          found = true;
          break;
        }
      if (found) break;
    }
    label.push_back(found ? section_name(s) : nullptr);
  }
  // Trace::str prints each top-level bound symbol on a line of its own at
  // two spaces' indent (its parts and del lines follow it); a section header
  // goes before the first line of each new section.
  std::istringstream in(t.str());
  std::ostringstream out;
  size_t k = 0;
  const char* current = nullptr;
  for (std::string line; std::getline(in, line);) {
    bool top = line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] != ' ' && line[2] != '#' &&
               line.compare(2, 4, "del ") != 0 && line.compare(2, 7, "return ") != 0;
    if (top && k < label.size()) {
      const char* l = label[k++];
      if (l && (!current || std::string(l) != current)) {
        out << "  # ---- " << l << " ----\n";
        current = l;
      }
    }
    out << line << "\n";
  }
  return out.str();
}

}  // namespace volt::jit
