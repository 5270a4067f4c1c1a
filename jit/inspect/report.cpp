// Collecting what a report page shows (jit/inspect/report.h) and writing the pages:
// on demand (write_report) or as programs compile (VOLT_JIT_REPORT).
#include <volt/jit/inspect/report.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include <volt/jit/codegen.h>
#include <volt/jit/events.h>
#include <volt/jit/fusion.h>

namespace volt::jit {

namespace {

namespace fs = std::filesystem;

// The kernel builds of the traces' fusions, from the kernel cache's log.
std::vector<KernelLoad> loads_for(const std::vector<const Trace*>& traces) {
  std::vector<KernelLoad> r;
  for (const KernelLoad& l : recent_kernel_loads())
    for (const Trace* t : traces) {
      bool match = false;
      for (const BoundSymbol& b : t->bsyms)
        if (b.kernel && std::find(l.names.begin(), l.names.end(), b.kernel->symbol) != l.names.end()) match = true;
      if (match) {
        r.push_back(l);
        break;
      }
    }
  return r;
}

void finish(CompileRecord& r) {
  std::vector<const Trace*> finals;
  if (!r.traces.empty()) finals.push_back(&r.traces.back());
  if (!r.backward_traces.empty()) finals.push_back(&r.backward_traces.back());
  r.kernel_loads = loads_for(finals);
}

CompileRecord record_from(const JitFunction::EntryInfo& e, const std::vector<std::string>& history,
                          const std::string& label) {
  CompileRecord r;
  r.kind = "jit";
  r.title = label + ", compile " + std::to_string(e.compile);
  r.key = e.key;
  r.reason = e.reason;
  r.hits = e.hits;
  r.traces = e.traces;
  r.backward_traces = e.backward_traces;
  for (const std::string& h : history) {
    r.history.push_back(h);
    if (h.rfind("compile " + std::to_string(e.compile) + ":", 0) == 0) break;  // up to this compile
  }
  finish(r);
  return r;
}

// A step's sections, one per bound symbol of its last trace, read back from
// its sectioned printout (a "# ---- forward ----" line opens a section; every
// top-level line is one bound symbol, as CompiledStep::last_trace_str prints).
std::vector<std::string> step_sections(const CompiledStep& step) {
  std::vector<std::string> r;
  std::istringstream in(step.last_trace_str());
  std::string current;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  # ---- ", 0) == 0) {
      current = line.substr(9, line.size() >= 14 ? line.size() - 14 : 0);
      continue;
    }
    const bool top = line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] != ' ' && line[2] != '#' &&
                     line.compare(2, 4, "del ") != 0 && line.compare(2, 7, "return ") != 0;
    if (top) r.push_back(current);
  }
  return r;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  VOLT_CHECK(f.good(), "jit report", "cannot write " << p.string());
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VOLT_CHECK(!ec && fs::is_directory(dir), "jit report", "cannot create the folder " << dir << ": " << ec.message());
}

void write_pages(std::vector<CompileRecord>& pages, const std::string& dir) {
  make_dir(dir);
  for (CompileRecord& r : pages) write_file(fs::path(dir) / r.file, render_page(r));
  write_file(fs::path(dir) / "index.html", render_index(pages));
}

}  // namespace

std::string kernel_source_of(const BoundSymbol& b) { return b.kernel ? b.kernel->source : std::string(); }

std::vector<CompileRecord> records_of(const JitFunction& f, const std::string& function_label) {
  std::vector<CompileRecord> r;
  const std::vector<std::string> history = f.miss_history();
  for (const JitFunction::EntryInfo& e : f.entry_infos()) {
    r.push_back(record_from(e, history, f.name().empty() ? function_label : f.name()));
    r.back().file = "jit-compile" + std::to_string(e.compile) + ".html";
  }
  return r;
}

CompileRecord record_of(const CompiledStep& step, const std::string& key) {
  CompileRecord r;
  r.kind = "step";
  r.title = "training step, compile " + std::to_string(step.compiles());
  r.file = "step-compile" + std::to_string(step.compiles()) + ".html";
  r.key = key;
  r.reason = step.last_miss_reason();
  r.hits = step.cache_hits();
  r.traces = step.last_traces();
  r.sections = step_sections(step);
  r.arena_bytes = step.arena_bytes();
  r.notes.push_back("One program: forward, loss, backward and the optimizer's update, with the parameters and "
                    "optimizer state updated in place.");
  finish(r);
  return r;
}

void write_report(const JitFunction& f, const std::string& dir) {
  std::vector<CompileRecord> pages = records_of(f);
  write_pages(pages, dir);
}

void write_report(const CompiledStep& step, const std::string& dir) {
  std::vector<CompileRecord> pages{record_of(step)};
  write_pages(pages, dir);
}

// ---------------------------------------------------------------- VOLT_JIT_REPORT

namespace {

struct Reporter {
  std::mutex mutex;
  std::string dir;
  std::vector<CompileRecord> pages;  // for the index (traces hold no data: proxies only)
  std::vector<std::pair<std::weak_ptr<const void>, int>> functions;
  int next_function = 1, steps = 0, lazy_graphs = 0;
  std::vector<std::string> lazy_history;
  bool announced = false;

  void add(CompileRecord r) {
    try {
      make_dir(dir);
      write_file(fs::path(dir) / r.file, render_page(r));
      pages.push_back(std::move(r));
      write_file(fs::path(dir) / "index.html", render_index(pages));
      if (!announced) {
        announced = true;
        std::cerr << "volt.jit: writing a report of every compile to " << (fs::path(dir) / "index.html").string()
                  << "\n";
      }
    } catch (const Error& e) {
      std::cerr << "volt.jit: " << e.what() << " (VOLT_JIT_REPORT)\n";
    }
  }
};

// Lives as long as the program (hooks may run at exit); set_report_dir may change its folder.
Reporter& the_reporter() {
  static Reporter* r = [] {
    auto* rep = new Reporter;
    if (const char* d = std::getenv("VOLT_JIT_REPORT")) rep->dir = d;
    return rep;
  }();
  return *r;
}

std::atomic<bool> g_enabled{[] {
  const char* d = std::getenv("VOLT_JIT_REPORT");
  return d && *d;
}()};

Reporter* reporter() { return g_enabled.load(std::memory_order_relaxed) ? &the_reporter() : nullptr; }

}  // namespace

bool report_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_report_dir(const std::string& dir) {
  Reporter& rep = the_reporter();
  std::lock_guard<std::mutex> lock(rep.mutex);
  if (rep.dir != dir) {
    rep.pages.clear();
    rep.functions.clear();
    rep.lazy_history.clear();
    rep.next_function = 1;
    rep.steps = rep.lazy_graphs = 0;
    rep.announced = false;
  }
  rep.dir = dir;
  g_enabled = !dir.empty();
}

void report_jit_compile(const JitFunction& f, std::shared_ptr<const void> identity) {
  Reporter* rep = reporter();
  if (!rep) return;
  std::vector<JitFunction::EntryInfo> entries = f.entry_infos();
  if (entries.empty()) return;
  std::lock_guard<std::mutex> lock(rep->mutex);
  int number = 0;
  for (auto& [w, n] : rep->functions)
    if (!w.owner_before(identity) && !identity.owner_before(w) && !w.expired()) number = n;
  if (!number) {
    number = rep->next_function++;
    rep->functions.emplace_back(identity, number);
  }
  const JitFunction::EntryInfo& newest = entries.back();  // the highest compile number
  // Titled by the function's name (a module's type) where it has one.
  const std::string label = f.name().empty() ? "function " + std::to_string(number)
                                              : f.name() + " (function " + std::to_string(number) + ")";
  CompileRecord r = record_from(newest, f.miss_history(), label);
  r.file = "jit-f" + std::to_string(number) + "-compile" + std::to_string(newest.compile) + ".html";
  rep->add(std::move(r));
}

void report_step_compile(const CompiledStep& step, const std::string& key) {
  Reporter* rep = reporter();
  if (!rep) return;
  CompileRecord r = record_of(step, key);
  std::lock_guard<std::mutex> lock(rep->mutex);
  r.file = "step" + std::to_string(++rep->steps) + "-compile" + std::to_string(step.compiles()) + ".html";
  rep->add(std::move(r));
}

void report_lazy_compile(const std::vector<Trace>& traces, const std::string& key, const std::string& reason,
                         size_t nodes) {
  Reporter* rep = reporter();
  if (!rep) return;
  CompileRecord r;
  r.kind = "lazy";
  r.key = key;
  r.reason = "flush: " + reason;
  r.traces = traces;
  r.notes.push_back("A lazy graph of " + std::to_string(nodes) +
                    " recorded ops, run because of its flush reason and compiled through the jit's pipeline.");
  finish(r);
  std::lock_guard<std::mutex> lock(rep->mutex);
  const int n = ++rep->lazy_graphs;
  r.title = "lazy graph " + std::to_string(n);
  r.file = "lazy-graph" + std::to_string(n) + ".html";
  r.history = rep->lazy_history;
  rep->lazy_history.push_back("graph " + std::to_string(n) + ": " + std::to_string(nodes) + " ops, " + r.reason);
  if (rep->lazy_history.size() > 256) rep->lazy_history.erase(rep->lazy_history.begin());
  rep->add(std::move(r));
}

}  // namespace volt::jit

// ---------------------------------------------------------------- the compile events

namespace volt::jit {
namespace {

// The report hears of every compile through the core's compile events
// (jit/events.h); it writes pages only while VOLT_JIT_REPORT names a folder.
const int g_report_hook = add_compile_hook([](const CompileEvent& e) {
  if (!report_enabled()) return;
  switch (e.source) {
    case CompileSource::Jit: report_jit_compile(*static_cast<const JitFunction*>(e.owner), e.identity); return;
    case CompileSource::Step: report_step_compile(*static_cast<const CompiledStep*>(e.owner), e.key); return;
    case CompileSource::Lazy: report_lazy_compile(*e.traces, e.key, e.reason, e.nodes); return;
  }
});

}  // namespace
}  // namespace volt::jit
