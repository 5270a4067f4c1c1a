#include <volt/jit/jit.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unordered_set>

#include <volt/autograd/node.h>
#include <volt/jit/autocast.h>
#include <volt/jit/cached_cast.h>
#include <volt/jit/check.h>
#include <volt/jit/codegen.h>
#include <volt/jit/events.h>
#include <volt/jit/fusion.h>
#include <volt/jit/grad.h>
#include <volt/jit/kernel_cache.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/log.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

std::string proxy_name_for(const std::string& dotted) {
  std::string r = "_";
  for (char c : dotted) r += c == '.' ? '_' : c;
  return r;
}

JitFunction::JitFunction(Fn fn, std::vector<std::string> input_names, std::vector<Tensor> captured,
                         std::vector<std::string> captured_names, std::function<bool()> training_flag,
                         JitOptions options)
    : fn_(std::move(fn)),
      input_names_(std::move(input_names)),
      captured_(std::move(captured)),
      captured_names_(std::move(captured_names)),
      training_(std::move(training_flag)),
      options_(std::move(options)) {
  std::vector<Executor*> user;
  for (Executor& e : options_.executors) user.push_back(&e);
  executors_ = executor_order(user);
}

JitFunction JitFunction::transformed(CallTransform t) const {
  JitFunction f(fn_, input_names_, captured_, captured_names_, training_, options_);
  f.transform_ = t;
  return f;
}

JitFunction JitFunction::with_autocast(DType low) const {
  JitOptions o = options_;
  o.autocast = low;
  JitFunction f(fn_, input_names_, captured_, captured_names_, training_, std::move(o));
  f.transform_ = transform_;
  return f;
}

std::optional<DType> JitFunction::autocast_now() const {
  return options_.autocast ? options_.autocast : autocast_dtype();
}

// Everything a trace depends on besides values: metadata of every input and
// parameter (contiguous or not, since an executor's checker may ask), the
// training flag, grad mode, the executors.
std::string JitFunction::key_for(const std::vector<Tensor>& args, size_t n_primals) const {
  std::ostringstream os;
  auto add = [&](const std::string& what, const Tensor& t) {
    os << what << "=" << t.meta_str() << (t.is_contiguous() ? "" : ",strided")
       << (t.requires_grad() ? ",grad" : "") << ";";
  };
  for (size_t i = 0; i < args.size(); ++i) add("input" + std::to_string(i), args[i]);
  // Parameters by the names the traces give them (_0_weight).
  for (size_t i = 0; i < captured_.size(); ++i)
    add(i < captured_names_.size() ? captured_names_[i] : "param" + std::to_string(i), captured_[i]);
  if (transform_ == CallTransform::Vjp) os << "primals=" << n_primals << ";";
  os << "training=" << (training_ ? training_() : false) << ";grad_mode=" << grad_enabled() << ";";
  if (std::optional<DType> low = autocast_now()) os << "autocast=" << dtype_name(*low) << ";";
  os << "executors=";
  for (const Executor* e : executors_) os << e->name() << ",";
  return os.str();
}

// The fields of key_for, mixed into 64 bits without building a string.
uint64_t JitFunction::hash_for(const std::vector<Tensor>& args, size_t n_primals) const {
  std::vector<uint64_t> fields;
  fields.reserve(8 * (args.size() + captured_.size()) + 4);
  auto mix = [&fields](uint64_t v) { fields.push_back(v); };
  auto add = [&](const Tensor& t) {
    mix(t.sizes().size());
    for (int64_t d : t.sizes()) mix(static_cast<uint64_t>(d));
    mix(static_cast<uint64_t>(t.dtype()));
    mix(static_cast<uint64_t>(t.device().type) * 64 + static_cast<uint64_t>(t.device().index));
    mix(t.requires_grad());
    mix(t.is_contiguous());  // checkers may accept only one layout
  };
  mix(args.size());
  for (const Tensor& t : args) add(t);
  for (const Tensor& t : captured_) add(t);
  mix(training_ ? training_() : false);
  mix(grad_enabled());
  mix(n_primals);
  std::optional<DType> low = autocast_now();
  mix(low ? 1 + static_cast<uint64_t>(*low) : 0);
  // The executors are fixed per JitFunction.
  return hash_bytes(fields.data(), fields.size() * sizeof(uint64_t));
}

static std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string fa, fb;
  while (std::getline(sa, fa, ';') && std::getline(sb, fb, ';'))
    if (fa != fb) return fb + " (was " + fa + ")";
  return "a different number of inputs";
}

// Runs each guard's ops on the real inputs and compares the value read when tracing.
bool JitFunction::guards_hold(const Entry& e, const std::vector<Tensor>& inputs, std::string* why) const {
  for (const Guard& g : e.guards) {
    Trace check;
    check.names = e.names;
    check.inputs = e.traces.front().inputs;
    check.bsyms = g.bsyms;
    check.outputs = {g.value};
    double v;
    {
      NoGradGuard no_grad;
      v = interpret(check, inputs).at(0).item_double();
    }
    if (v != g.expected) {
      if (why) *why = "value of " + e.names->name(g.value) + " is " + python_float_repr(v) + ", the trace read " +
                      python_float_repr(g.expected);
      return false;
    }
  }
  return true;
}


std::shared_ptr<JitFunction::Entry> JitFunction::compile(const std::vector<Tensor>& args, size_t n_primals,
                                                         std::optional<DType> low) {
  auto t0 = Clock::now();
  Fn traced = fn_;
  std::vector<std::string> input_names = input_names_;
  if (transform_ == CallTransform::Vjp) {
    // The cotangents are inputs of the program but not of the function.
    traced = [fn = fn_, n_primals](const std::vector<Tensor>& in) {
      return fn(std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n_primals)));
    };
    input_names.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      if (i >= n_primals) input_names[i] = "cotangent_" + std::to_string(i - n_primals);
      else if (i >= input_names_.size()) input_names[i] = "t_" + std::to_string(i);
  }
  TraceResult tr = trace_function(traced, args, input_names, captured_, captured_names_);
  tr.trace.millis = ms_since(t0);
  auto e = std::make_shared<Entry>();
  e->names = tr.names;
  e->guards = tr.trace.guards;
  e->traces.push_back(tr.trace);
  e->traces.push_back(dce_cse_pass(e->traces.back()));
  if (low) {  // before the grad pass, which then differentiates the casts
    e->traces.push_back(autocast_pass(e->traces.back(), *e->names, *low));
    e->traces.push_back(dce_cse_pass(e->traces.back()));
    // A parameter's cast is read from the cast cache: once per value, not per call.
    Trace cached = cached_casts_pass(e->traces.back(), captured_.size());
    if (cached.provenance != e->traces.back().provenance) e->traces.push_back(std::move(cached));
  }
  // The rewrites of prims before the grad pass: a fused prim's VJP reads its output.
  run_stage(PassStage::Prims, e->traces, options_.pipeline);
  e->num_outputs = e->traces.back().outputs.size();
  const size_t n_captured = captured_.size();

  if (transform_ != CallTransform::None) {
    // One program: forward, cotangents (ones, or vjp's arguments), backward;
    // returns input grads.
    const Trace& fwd = e->traces.back();
    const size_t first_cotangent = n_captured + n_primals;
    if (transform_ == CallTransform::Vjp) {
      VOLT_CHECK(args.size() - n_primals == fwd.outputs.size(), "vjp",
                 "the function has " << fwd.outputs.size() << " outputs, so it needs as many cotangents, got "
                                     << args.size() - n_primals);
      for (size_t k = 0; k < fwd.outputs.size(); ++k) {
        const Tensor& c = fwd.inputs[first_cotangent + k];
        VOLT_CHECK(c.sizes() == fwd.outputs[k].sizes() && c.dtype() == fwd.outputs[k].dtype(), "vjp",
                   "cotangent " << k << " is " << c.meta_str() << " but output " << k << " is "
                                << fwd.outputs[k].meta_str());
      }
    }
    std::vector<bool> needs(fwd.inputs.size(), false);
    for (size_t i = n_captured; i < first_cotangent; ++i) needs[i] = is_floating(fwd.inputs[i].dtype());
    GradTraces g = grad_pass(fwd, *e->names, needs, executors_);
    Trace t = fwd;
    t.bsyms = g.forward.bsyms;
    std::unordered_map<int64_t, Tensor> seed_of;  // backward cotangent -> its value
    size_t n_saved = g.backward.split;
    std::vector<BoundSymbol> seeds = record(*e->names, [&] {
      for (size_t k = n_saved; k < g.backward.inputs.size(); ++k) {
        const Tensor& c = g.backward.inputs[k];
        seed_of[id_of(c)] = transform_ == CallTransform::Vjp ? fwd.inputs[first_cotangent + (k - n_saved)]
                                                          : full(c.sizes(), 1.0, c.dtype(), c.device());
      }
    }, /*flatten=*/false);
    std::vector<BoundSymbol> bwd = g.backward.bsyms;
    substitute(bwd, seed_of);
    inline_saved_scalars(bwd);  // one program: the scalars are its own constants
    t.bsyms.insert(t.bsyms.end(), seeds.begin(), seeds.end());
    t.bsyms.insert(t.bsyms.end(), bwd.begin(), bwd.end());
    t.outputs = transform_ == CallTransform::Grad ? std::vector<Tensor>{} : fwd.outputs;
    for (const Tensor& o : g.backward.outputs) {
      auto it = seed_of.find(id_of(o));
      t.outputs.push_back(it != seed_of.end() ? it->second : o);
    }
    t.kind = Trace::Kind::Plain;
    t.provenance = "Grad transform";
    t.millis = g.backward.millis;
    e->traces.push_back(dce_cse_pass(t));
    e->traces.back().provenance = "Grad transform";
    e->num_outputs = e->traces.back().outputs.size();
    compile_pipeline(e->traces, *e->names, executors_, options_.pipeline);
    return e;
  }

  std::vector<bool> needs_grad;
  bool any = false;
  for (const Tensor& t : captured_) needs_grad.push_back(t.requires_grad());
  for (const Tensor& t : args) needs_grad.push_back(t.requires_grad());
  for (bool b : needs_grad) any |= b;
  if (grad_enabled() && any) {
    GradTraces g = grad_pass(e->traces.back(), *e->names, needs_grad, executors_);
    e->traces.push_back(std::move(g.forward));
    e->backward_traces.push_back(std::move(g.backward));
    e->grad_input_index = std::move(g.grad_input_index);
  }
  // Executors and fusion bypass the eager tape, so they run where the gradient
  // comes from the backward trace, or where no gradient is needed.  Otherwise
  // every prim runs eagerly and the tape records it.
  if (!e->backward_traces.empty() || !(grad_enabled() && any)) {
    compile_pipeline(e->traces, *e->names, executors_, options_.pipeline);
    if (!e->backward_traces.empty()) compile_pipeline(e->backward_traces, *e->names, executors_, options_.pipeline);
  } else {
    prepare(e->traces.back());
  }
  // Every trace of the entry must read as a valid program.
  for (const std::vector<Trace>* list : {&e->traces, &e->backward_traces})
    for (const Trace& tr : *list) check_trace(tr);
  return e;
}

std::vector<Tensor> JitFunction::operator()(const std::vector<Tensor>& primals,
                                             const std::vector<Tensor>& cotangents) {
  VOLT_CHECK(transform_ == CallTransform::Vjp, "jit",
             "a call with primals and cotangents is for vjp(f); call this function with its arguments");
  std::vector<Tensor> args = primals;
  args.insert(args.end(), cotangents.begin(), cotangents.end());
  return call(args, primals.size());
}

std::vector<Tensor> JitFunction::operator()(const std::vector<Tensor>& args) {
  VOLT_CHECK(transform_ != CallTransform::Vjp, "vjp",
             "call vjp(f) with two lists, (primals, cotangents), not one");
  return call(args, args.size());
}

std::shared_ptr<JitFunction::Entry> JitFunction::lookup(uint64_t hash, const std::string& key,
                                                        const std::vector<Tensor>& inputs,
                                                        std::string* guard_failure) {
  // The candidates are copied out under the lock; guards run without it
  // (they run ops), on entries that are never changed once stored.
  std::vector<std::shared_ptr<Entry>> candidates;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->cache.find(hash);
    if (it == state_->cache.end()) return nullptr;
    // Almost always one bucket; the readable key tells colliding hashes apart.
    for (const Bucket& b : it->second)
      if (b.key == key) candidates = b.entries;
  }
  for (const std::shared_ptr<Entry>& e : candidates)
    if (e->guards.empty() || guards_hold(*e, inputs, guard_failure)) {
      if (candidates.size() > 1) {  // most recently used first
        std::lock_guard<std::mutex> lock(state_->mutex);
        for (Bucket& b : state_->cache[hash])
          if (b.key == key)
            if (auto at = std::find(b.entries.begin(), b.entries.end(), e); at != b.entries.end())
              std::rotate(b.entries.begin(), at, at + 1);
      }
      return e;
    }
  return nullptr;
}

std::vector<Tensor> JitFunction::call(const std::vector<Tensor>& args, size_t n_primals) {
  std::vector<Tensor> inputs = captured_;
  inputs.insert(inputs.end(), args.begin(), args.end());
  const bool caching = options_.cache != CacheMode::None;
  const uint64_t hash = hash_for(args, n_primals);
  const std::string key = key_for(args, n_primals);
  const std::optional<DType> low = autocast_now();
  // The trace has its casts (or none): the ops it runs are not cast again.
  AutocastGuard as_traced(std::nullopt);
  std::string guard_failure;
  std::shared_ptr<Entry> entry = caching ? lookup(hash, key, inputs, &guard_failure) : nullptr;
  if (!entry) {
    // One compile at a time; a thread that waited here finds what the one
    // before it stored, so each key and guard outcome is compiled once.
    std::lock_guard<std::mutex> compiling(state_->compile_mutex);
    if (caching) entry = lookup(hash, key, inputs, &guard_failure);
    if (!entry) {
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (!caching) reason = "caching is off";
        else if (!guard_failure.empty()) reason = guard_failure;
        else reason = state_->last_key.empty() ? "first call" : first_difference(state_->last_key, key);
        state_->miss_reason = reason;
      }
      const int64_t misses = ++state_->misses;
      if (log_enabled("jit")) std::cerr << "volt.jit: compiling (" << reason << ")\n";
      if (misses == 9 && caching)
        std::cerr << "volt.jit: warning: this function was compiled 9 times; inputs whose shapes, "
                     "dtypes or requires_grad keep changing defeat the cache (last change: "
                  << reason << ")\n";
      entry = compile(args, n_primals, low);
      entry->key = key;
      entry->reason = reason;
      entry->compile = misses;
      std::unique_lock<std::mutex> lock(state_->mutex);
      state_->miss_history.push_back("compile " + std::to_string(misses) + ": " + reason);
      if (state_->miss_history.size() > 256) state_->miss_history.erase(state_->miss_history.begin());
      if (caching) {
        std::vector<Bucket>& buckets = state_->cache[hash];
        Bucket* bucket = nullptr;
        for (Bucket& b : buckets)
          if (b.key == key) bucket = &b;
        if (!bucket) bucket = &buckets.emplace_back(Bucket{key, {}, 0, false});
        // Entries of one key differ by their guards' values: the most recently
        // used first, at most kMaxGuardedEntries of them.
        bucket->entries.insert(bucket->entries.begin(), entry);
        if (bucket->entries.size() > kMaxGuardedEntries) bucket->entries.resize(kMaxGuardedEntries);
        if (!guard_failure.empty() && ++bucket->guard_recompiles == kGuardWarnAfter && !bucket->warned) {
          bucket->warned = true;
          std::cerr << guard_warning(*entry, reason);
        }
      }
      state_->last_key = key;
      state_->last = entry;
      lock.unlock();
      publish_compile({CompileSource::Jit, this, state_, key, reason, &entry->traces});
    } else {
      ++entry->hits;
      ++state_->hits;
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->last = entry;
    }
  } else {
    ++state_->hits;
    ++entry->hits;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->last = entry;
  }
  // From here on only `entry`, the one this call looked up or made, is used.
  if (!entry->backward_traces.empty()) return run_with_grad(entry, inputs);
  if (transform_ != CallTransform::None) {
    NoGradGuard no_grad;
    return interpret(entry->traces.back(), inputs);
  }
  return interpret(entry->traces.back(), inputs);
}

// The warning after repeated recompiles on one guard: its source (the
// lines computing the value it reads) and the rewrite that makes it hold.
std::string JitFunction::guard_warning(const Entry& e, const std::string& reason) {
  std::ostringstream os;
  os << "volt.jit: warning: compiled " << kGuardWarnAfter
     << " times for new values of a value the function reads (last: " << reason << ").\n";
  for (const Guard& g : e.guards) {
    os << "  the guard reads " << e.names->name(g.value) << ".item()";
    if (!g.bsyms.empty()) os << ", where";
    os << "\n";
    Trace t;
    t.names = e.names;
    t.inputs = e.traces.front().inputs;
    t.bsyms = g.bsyms;
    t.outputs = {g.value};
    std::istringstream lines(t.str());
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("  ", 0) == 0 && line.find("  # ") != 0 && line.find("return") == std::string::npos)
        os << "  " << line << "\n";
  }
  os << "  Branch on a comparison's outcome instead of a value, e.g. bool(gt(sum(x), 0.0)) rather than "
        "sum(x).item() > 0: the guard then records true or false, and every value with the same outcome "
        "reuses the trace. At most "
     << kMaxGuardedEntries << " such entries are kept per input signature (least recently used dropped).\n";
  return os.str();
}

namespace {

// The autograd node of a jitted call: runs the backward trace on what the
// augmented forward saved, with the forward's random counters.
// With several outputs each has its own node, which runs the backward trace
// with its gradient and zeros for the other outputs' cotangents; the tape
// sums what the nodes give each input.
struct JitNode final : autograd::Node {
  std::shared_ptr<const Trace> backward;
  std::vector<Tensor> saved;
  std::vector<uint64_t> versions;   // each saved tensor's version when it was saved
  PhiloxState rng;
  size_t output = 0;                // which output this node is the history of
  std::vector<TensorMeta> outputs;  // every output's metadata (for the zeros)

  std::vector<Tensor> apply(const Tensor& grad_out) override {
    VOLT_CHECK(!released, "backward",
               "trying to backward through a jitted call a second time; its saved tensors were "
               "freed. Pass retain_graph=true the first time");
    // As eager autograd: a saved tensor written in place since (an input scaled
    // with mul_, say) would give a silently wrong gradient.
    for (size_t i = 0; i < saved.size() && i < versions.size(); ++i) {
      VOLT_CHECK(!saved[i].has_data() || saved[i].version() == versions[i], "backward",
                 "one of the tensors a jitted call saved for backward was modified by an in-place operation: "
                     << "saved tensor " << i << ", " << saved[i].meta_str() << ", is at version " << saved[i].version()
                     << ", it was saved at version " << versions[i]
                     << ". Write to a clone() instead, or after backward");
    }
    std::vector<Tensor> in = saved;
    for (size_t k = 0; k < outputs.size(); ++k)
      in.push_back(k == output ? grad_out : full(outputs[k].sizes, 0.0, outputs[k].dtype, outputs[k].device));
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
  std::vector<Tensor> outs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(e->num_outputs));
  std::vector<TensorMeta> metas;
  for (const Tensor& o : outs) metas.push_back({o.sizes(), o.dtype(), o.device()});
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;  // no gradient flows into an integer output
    auto node = std::make_shared<JitNode>();
    node->backward = std::shared_ptr<const Trace>(e, &e->backward_traces.back());  // shares the entry, no copy
    node->saved.assign(all.begin() + static_cast<std::ptrdiff_t>(e->num_outputs), all.end());
    for (const Tensor& t : node->saved) node->versions.push_back(t.defined() ? t.version() : 0);
    node->rng = used;
    node->output = k;
    node->outputs = metas;
    for (int idx : e->grad_input_index) node->next.push_back(autograd::edge_for(inputs[idx]));
    // Outputs that alias an input (an identity function) get a fresh tensor to hang history on.
    if (outs[k].requires_grad()) outs[k] = outs[k].detach();
    autograd::set_history(outs[k], node);
  }
  return outs;
}

}  // namespace volt::jit
