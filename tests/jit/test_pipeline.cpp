// The one compile pipeline (jit/pipeline.h): its named passes, the rewrites
// switched off by option or by VOLT_JIT_REWRITES=0, and the compile events the
// inspection tools subscribe to (jit/events.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include <volt/jit/events.h>
#include <volt/jit/jit.h>
#include <volt/jit/pipeline.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

bool has_pass(const std::string& name) {
  for (const jit::NamedPass& p : jit::registered_passes())
    if (p.name == name) return true;
  return false;
}

bool any_provenance(const std::vector<jit::Trace>& traces, const std::string& name) {
  return std::any_of(traces.begin(), traces.end(), [&](const jit::Trace& t) { return t.provenance == name; });
}

size_t gemm_regions(const jit::Trace& t) {
  return static_cast<size_t>(std::count_if(t.bsyms.begin(), t.bsyms.end(), jit::is_gemm_epilogue));
}

}  // namespace

TEST_CASE("pipeline: the rewrites and the step's collectives are named passes of the one pipeline") {
  CHECK(has_pass("GEMM epilogues"));
  CHECK(has_pass("Convolution and ReLU"));
  CHECK(has_pass("Place collectives"));
  jit::PipelineOptions plain;
  plain.rewrites = false;
  for (const jit::NamedPass& p : jit::registered_passes()) {
    CAPTURE(p.name);
    CHECK(plain.runs(p) == (!p.rewrite && !p.opt_in));
  }
  jit::PipelineOptions some;
  some.without.push_back("GEMM epilogues");
  some.with.push_back("Place collectives");
  for (const jit::NamedPass& p : jit::registered_passes())
    if (p.name == "GEMM epilogues") CHECK_FALSE(some.runs(p));
    else if (p.name == "Place collectives") CHECK(some.runs(p));
}

TEST_CASE("pipeline: without its rewrites the jit prints the plain trace, with the same result") {
  manual_seed(3);
  auto net = std::make_shared<nn::MLP>(16, std::vector<int64_t>{32, 4}, false, 0.0);
  net->eval();
  const Tensor x = Tensor::randn({8, 16});
  NoGradGuard no_grad;
  auto fast = jit::jit(net);
  jit::JitOptions plain_options;
  plain_options.pipeline.rewrites = false;
  auto plain = jit::jit(net, plain_options);
  const Tensor a = fast(x), b = plain(x);
  CHECK(any_provenance(jit::last_traces(fast), "GEMM epilogues"));
  CHECK(gemm_regions(jit::last_traces(fast).back()) > 0);
  CHECK_FALSE(any_provenance(jit::last_traces(plain), "GEMM epilogues"));
  CHECK(gemm_regions(jit::last_traces(plain).back()) == 0);
  CHECK(amax(abs(a - b)).item_double() < 1e-5);
}

TEST_CASE("pipeline: VOLT_JIT_REWRITES=0 is the default of the options") {
  const char* old = std::getenv("VOLT_JIT_REWRITES");
  const std::string saved = old ? old : "";
  setenv("VOLT_JIT_REWRITES", "0", 1);
  CHECK_FALSE(jit::rewrites_enabled_by_default());
  CHECK_FALSE(jit::PipelineOptions{}.rewrites);
  setenv("VOLT_JIT_REWRITES", "1", 1);
  CHECK(jit::rewrites_enabled_by_default());
  if (old) setenv("VOLT_JIT_REWRITES", saved.c_str(), 1);
  else unsetenv("VOLT_JIT_REWRITES");
}

TEST_CASE("pipeline: every compile publishes an event with its traces") {
  std::vector<std::string> seen;
  const int id = jit::add_compile_hook([&](const jit::CompileEvent& e) {
    if (e.source == jit::CompileSource::Jit && e.traces) seen.push_back(e.traces->back().provenance);
  });
  auto f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0 + 1.0}; },
                    jit::JitOptions{});
  f(Tensor::ones({4}));
  f(Tensor::ones({4}));  // a hit: no event
  f(Tensor::ones({5}));
  jit::remove_compile_hook(id);
  f(Tensor::ones({6}));
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "Delete Last Used");
}
