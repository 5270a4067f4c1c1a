// The compile pipeline every front end runs (jit(), the lazy device and
// compile_step) on a trace of prims, one list of passes:
//
//   [rewrites on prims] -> claim (executors take bound symbols) -> fusion
//   (elementwise runs become regions with generated kernels) -> [rewrites on
//   regions] -> compile the kernels -> [passes on the schedule] ->
//   delete-last-used -> the front end's memory plan -> check every trace
//
// The bracketed stages hold named passes registered from above the core: the
// pattern rewrites of jit/rewrites/ (GEMM epilogues, convolution and ReLU) and
// the compiled step's collectives (jit/step/).  Each appends its trace, whose
// provenance is the pass's name, so a printed pass list says what ran.  The
// rewrites are on by default; VOLT_JIT_REWRITES=0 (or PipelineOptions)
// switches them off to show the plain trace of prims and fusions.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <volt/jit/executor.h>
#include <volt/jit/trace.h>

namespace volt::jit {

// Where a named pass runs.
enum class PassStage {
  Prims,     // on the prims, before claim (the jit runs it before the grad pass too)
  Regions,   // after fusion, before the kernels are compiled
  Schedule,  // after the kernels are compiled, before delete-last-used
};

struct NamedPass {
  std::string name;  // also the provenance of the trace it appends
  PassStage stage;
  bool rewrite;  // a pattern rewrite for speed: switched off with the others
  bool opt_in;   // runs only where a front end asks for it by name
  // Appends its rewritten form of traces.back() (or leaves the list as it is).
  std::function<void(std::vector<Trace>&)> run;
};

// Registers a pass (at start-up, from the file that defines it).
void register_pass(NamedPass pass);
// The registered passes, in registration order.
std::vector<NamedPass> registered_passes();

// False when VOLT_JIT_REWRITES=0: the default of PipelineOptions::rewrites.
bool rewrites_enabled_by_default();

struct PipelineOptions {
  // The pattern rewrites (jit/rewrites/), all of them.
  bool rewrites = rewrites_enabled_by_default();
  // Passes switched off by name ("GEMM epilogues").
  std::vector<std::string> without;
  // Opt-in passes switched on by name ("Place collectives").
  std::vector<std::string> with;
  // The front end's memory plan of the final trace, timed into it (a compiled
  // step's arena); none by default.
  std::function<void(Trace&)> plan;

  bool runs(const NamedPass& p) const;
};

// Runs the passes of one stage that `options` enables, in registration order.
void run_stage(PassStage stage, std::vector<Trace>& traces, const PipelineOptions& options);

// The whole pipeline on traces.back(); each pass appends its trace.
void compile_pipeline(std::vector<Trace>& traces, ProxyNames& names, const std::vector<Executor*>& executors,
                      const PipelineOptions& options = {});

}  // namespace volt::jit
