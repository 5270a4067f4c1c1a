#include <volt/jit/pipeline.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <volt/jit/check.h>
#include <volt/jit/del_last_used.h>
#include <volt/jit/fusion.h>
#include <volt/jit/interpreter.h>
#include <volt/jit/passes.h>

namespace volt::jit {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<NamedPass> passes;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: registrars of other files run at start-up
  return *r;
}

bool named(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

void register_pass(NamedPass pass) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.passes.push_back(std::move(pass));
}

std::vector<NamedPass> registered_passes() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.passes;
}

bool rewrites_enabled_by_default() {
  const char* e = std::getenv("VOLT_JIT_REWRITES");
  return !(e && std::strcmp(e, "0") == 0);
}

// VOLT_JIT_WITHOUT: names of passes, separated by commas, that no compile
// runs (as PipelineOptions::without), to tell which pass a wrong result
// comes from without rebuilding the program.
static bool turned_off_by_env(const std::string& name) {
  const char* e = std::getenv("VOLT_JIT_WITHOUT");
  if (!e || !*e) return false;
  const std::string list = std::string(",") + e + ",";
  return list.find("," + name + ",") != std::string::npos;
}

bool PipelineOptions::runs(const NamedPass& p) const {
  if (named(without, p.name) || turned_off_by_env(p.name)) return false;
  if (p.opt_in) return named(with, p.name);
  return !p.rewrite || rewrites;
}

void run_stage(PassStage stage, std::vector<Trace>& traces, const PipelineOptions& options) {
  for (const NamedPass& p : registered_passes())
    if (p.stage == stage && options.runs(p)) p.run(traces);
}

void compile_pipeline(std::vector<Trace>& list, ProxyNames& names, const std::vector<Executor*>& executors,
                      const PipelineOptions& options) {
  run_stage(PassStage::Prims, list, options);
  list.push_back(claim_pass(list.back(), names, executors));
  list.push_back(fusion_pass(list.back()));
  run_stage(PassStage::Regions, list, options);
  auto c0 = Clock::now();
  compile_fusions(list.back());
  list.back().millis += ms_since(c0);
  run_stage(PassStage::Schedule, list, options);
  list.push_back(del_last_used_pass(list.back()));
  prepare(list.back());
  if (options.plan) {
    auto p0 = Clock::now();
    options.plan(list.back());
    list.back().millis += ms_since(p0);
  }
  for (const Trace& t : list) check_trace(t);
}

}  // namespace volt::jit
