// The jit report: one self-contained HTML page per compiled program (a jit
// cache entry, a compiled training step, a lazy graph) and an index page.
//
//   VOLT_JIT_REPORT=/tmp/r ./build/examples/mnist_mlp --limit-steps 10
//   # then open /tmp/r/index.html: no network needed
//
//   volt::jit::write_report(jm, "/tmp/r");   // the same for one function, on demand
//
// A page shows, top to bottom: why the program was compiled (cache key,
// guards, the function's miss history), the compile time of each pass and of
// each fused kernel (built by the host compiler, or found in the kernel
// cache), the memory picture (tensors saved for backward and their bytes,
// the peak of live intermediates, a compiled step's arena), the final trace
// as a graph (SVG through Graphviz when installed, else its DOT text), every
// fused region's prims beside its generated kernel with the same names,
// grouped by the layer (module) the region came from, a kernel shown once
// (a repeated block's regions link to the first), and every pass's trace in
// order with a diff against the pass before it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/kernel_cache.h>
#include <volt/jit/step/step.h>

namespace volt::jit {

// Everything a page shows about one compiled program.
struct CompileRecord {
  std::string kind;   // "jit", "step" or "lazy"
  std::string title;  // "MLP (function 1), compile 2", or "function 1, compile 2" unnamed
  std::string file;   // the page's file name in the report folder
  std::string key;    // the readable cache key ("" when unknown)
  std::string reason;  // why it was compiled (a lazy graph: its flush reason)
  std::vector<std::string> history;  // the owner's earlier compiles and why
  int64_t hits = -1;                 // cache hits so far (-1: not counted)
  std::vector<Trace> traces;           // one per pass; the last one runs
  std::vector<Trace> backward_traces;  // a jit entry that needs gradients
  std::vector<std::string> sections;   // per bound symbol of traces.back() (a step's forward, ...)
  size_t arena_bytes = 0;              // a compiled step's memory plan
  std::vector<std::string> notes;      // anything else worth a line
  std::vector<KernelLoad> kernel_loads;  // how the final traces' fused kernels were built
};

// The record of each entry of f's cache, oldest compile first.
std::vector<CompileRecord> records_of(const JitFunction& f, const std::string& function_label = "function");
// The record of a compiled step's last program.  `key`: its cache key, when known.
CompileRecord record_of(const CompiledStep& step, const std::string& key = "");

// The HTML of one page, and of an index over pages.
std::string render_page(const CompileRecord& r);
std::string render_index(const std::vector<CompileRecord>& pages);

// Writes a page per entry of f (or the step's program) and index.html into
// the folder `dir` (created if missing).  Throws volt::Error when it cannot write.
void write_report(const JitFunction& f, const std::string& dir);
void write_report(const CompiledStep& step, const std::string& dir);

// ---- VOLT_JIT_REPORT: the report written while a program runs ----
// Whether VOLT_JIT_REPORT names a folder; every compile then adds its page and
// rewrites the index.
bool report_enabled();
// Starts writing the report into `dir` from now on (a fresh index); "" stops.
void set_report_dir(const std::string& dir);
// Called after each compile (identity: the function's cache, so that copies
// of one function share a number).
void report_jit_compile(const JitFunction& f, std::shared_ptr<const void> identity);
void report_step_compile(const CompiledStep& step, const std::string& key);
// The lazy device's hook: a compiled graph, its key and its flush reason.
void report_lazy_compile(const std::vector<Trace>& traces, const std::string& key, const std::string& reason,
                         size_t nodes);

// The kernel source generated for a fused region ("" for any other bound symbol).
std::string kernel_source_of(const BoundSymbol& b);

// Text made safe inside HTML elements and attribute values.
std::string html_escape(const std::string& s);
// A line diff of two texts: "  same", "- removed", "+ added" lines, with
// unchanged runs longer than 2 * context lines shortened to "@@ n unchanged lines @@".
std::string line_diff(const std::string& before, const std::string& after, size_t context = 3);
// The lines of a text, without their newlines.
std::vector<std::string> lines_of(const std::string& s);

}  // namespace volt::jit
