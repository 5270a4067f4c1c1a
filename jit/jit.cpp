#include "jit/jit.h"

#include <chrono>
#include <sstream>

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
    auto t0 = std::chrono::steady_clock::now();
    TraceResult tr = trace_function(fn_, args, input_names_, captured_, captured_names_);
    tr.trace.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto e = std::make_shared<Entry>();
    e->names = tr.names;
    e->traces.push_back(tr.trace);
    e->traces.push_back(decompose_pass(e->traces.back()));
    e->traces.push_back(dce_cse_pass(e->traces.back()));
    cache_[key] = e;
    last_ = e;
  }
  last_key_ = key;
  std::vector<Tensor> inputs = captured_;
  inputs.insert(inputs.end(), args.begin(), args.end());
  return interpret(last_->traces.back(), inputs);
}

const std::vector<Trace>& JitFunction::last_traces() const {
  static const std::vector<Trace> none;
  return last_ ? last_->traces : none;
}

}  // namespace volt::jit
