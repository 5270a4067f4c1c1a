// The HTML of the jit report (jit/inspect/report.h): one page per compiled program,
// and the index.  Everything is inline (style, script, SVG): a page opens
// from disk with no network.
#include <volt/jit/inspect/report.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/codegen.h>
#include <volt/jit/inspect/dot.h>
#include <volt/jit/executor.h>
#include <volt/jit/rewrites/gemm_epilogue.h>

namespace volt::jit {

namespace {

#include "report_html_assets.inc"  // kStyle, kScript

std::string page_head(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + html_escape(title) +
         "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
}

std::string fmt_ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", ms);
  return b;
}

std::string fmt_bytes(size_t bytes) {
  char b[48];
  if (bytes >= 1000000) std::snprintf(b, sizeof b, "%zu (%.2f MB)", bytes, bytes / 1e6);
  else if (bytes >= 1000) std::snprintf(b, sizeof b, "%zu (%.1f kB)", bytes, bytes / 1e3);
  else std::snprintf(b, sizeof b, "%zu", bytes);
  return b;
}

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

// Text with the value names in `names` wrapped for highlighting; in_x and
// out_x (a kernel's pointers) highlight their x.
std::string mark_names(const std::string& text, const std::unordered_set<std::string>& names) {
  std::string r;
  auto is_id = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto span = [&](const std::string& n) {
    return "<span class=\"v\" data-v=\"" + html_escape(n) + "\">" + html_escape(n) + "</span>";
  };
  for (size_t i = 0; i < text.size();) {
    if (!is_id(text[i]) || std::isdigit(static_cast<unsigned char>(text[i]))) {
      size_t e = i + 1;
      // Numbers stay whole (so 0.5 is not split into identifiers).
      if (std::isdigit(static_cast<unsigned char>(text[i])))
        while (e < text.size() && is_id(text[e])) ++e;
      r += html_escape(text.substr(i, e - i));
      i = e;
      continue;
    }
    size_t e = i;
    while (e < text.size() && is_id(text[e])) ++e;
    const std::string id = text.substr(i, e - i);
    if (names.count(id)) r += span(id);
    else if (id.rfind("in_", 0) == 0 && names.count(id.substr(3))) r += "in_" + span(id.substr(3));
    else if (id.rfind("out_", 0) == 0 && names.count(id.substr(4))) r += "out_" + span(id.substr(4));
    else r += html_escape(id);
    i = e;
  }
  return r;
}

const ProxyNames* names_in(const Trace& t) { return t.names.get(); }

// The fusion as the trace prints it, without the trace around it.
std::string region_text(const Trace& owner, const BoundSymbol& fusion) {
  Trace mini;
  mini.names = owner.names;
  mini.name = fusion.fusion_name;
  mini.inputs = fusion.fusion_inputs;
  BoundSymbol b = fusion;
  b.del_after.clear();
  mini.bsyms = {b};
  mini.outputs = fusion.outputs;
  if (mini.inputs.empty() && mini.outputs.empty()) return "";
  std::string s = mini.str();
  return s.substr(s.find('\n') + 1);  // no "# Constructed by" line
}

std::string pre_diff(const std::string& diff) {
  std::string r = "<pre class=\"diff\">";
  for (const std::string& l : lines_of(diff)) {
    const char* cls = l.rfind("+ ", 0) == 0 ? "add" : l.rfind("- ", 0) == 0 ? "del" : l.rfind("@@", 0) == 0 ? "gap" : nullptr;
    r += cls ? "<span class=\"" + std::string(cls) + "\">" + html_escape(l) + "</span>\n" : html_escape(l) + "\n";
  }
  return r + "</pre>\n";
}

// Everything after the first line (the "# Constructed by ..." header differs every pass).
std::string body_of(const std::string& trace_text) { return trace_text.substr(trace_text.find('\n') + 1); }

// The peak bytes of values made by the trace and alive at once, walking it in
// order and freeing what delete-last-used marks.
size_t live_peak(const Trace& t) {
  std::unordered_set<int64_t> outputs;
  size_t live = 0, peak = 0;
  std::unordered_map<int64_t, size_t> size_of;
  for (const BoundSymbol& b : t.bsyms) {
    for (const Tensor& o : b.outputs) {
      size_of[id_of(o)] = bytes_of(o);
      live += bytes_of(o);
    }
    peak = std::max(peak, live);
    for (const Tensor& d : b.del_after)
      if (auto it = size_of.find(id_of(d)); it != size_of.end()) {
        live -= it->second;
        size_of.erase(it);
      }
  }
  return peak;
}

struct FinalTrace {
  std::string label;
  const Trace* trace;
};

std::vector<FinalTrace> finals(const CompileRecord& r) {
  std::vector<FinalTrace> f;
  if (!r.traces.empty())
    f.push_back({r.backward_traces.empty() ? "the program" : "forward (augmented)", &r.traces.back()});
  if (!r.backward_traces.empty()) f.push_back({"backward", &r.backward_traces.back()});
  return f;
}

void section_why(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"why\">Why it was compiled</h2>\n<table>\n<tr><th>reason</th><td>" << html_escape(r.reason)
     << "</td></tr>\n";
  if (r.hits >= 0) os << "<tr><th>cache hits since</th><td class=\"num\">" << r.hits << "</td></tr>\n";
  os << "</table>\n";
  os << "<h3>Cache key</h3>\n";
  if (r.key.empty()) {
    os << "<p class=\"note\">not recorded for this program</p>\n";
  } else {
    std::string k = r.key;
    if (r.kind != "lazy") std::replace(k.begin(), k.end(), ';', '\n');
    os << "<p class=\"note\">A later call reuses this program while every field matches.</p>\n<pre class=\"key\">"
       << html_escape(k) << "</pre>\n";
  }
  os << "<h3>Guards</h3>\n";
  const std::vector<Guard>* guards = r.traces.empty() ? nullptr : &r.traces.front().guards;
  if (!guards || guards->empty()) {
    os << "<p class=\"note\">none: the trace read no tensor's value, so metadata alone decides a hit</p>\n";
  } else {
    for (const Guard& g : *guards) {
      Trace t;
      t.names = r.traces.front().names;
      t.name = "guard";
      t.inputs = r.traces.front().inputs;
      t.bsyms = g.bsyms;
      t.outputs = {g.value};
      const ProxyNames* n = names_in(r.traces.front());
      os << "<p class=\"guard\">" << html_escape((n ? n->name(g.value) : std::string("?")) + ".item() == " +
                                                 python_float_repr(g.expected))
         << " (another value compiles again), computed by:</p>\n<pre>" << html_escape(body_of(t.str())) << "</pre>\n";
    }
  }
  os << "<h3>Miss history</h3>\n";
  if (r.history.empty()) os << "<p class=\"note\">no earlier compiles recorded</p>\n";
  else {
    os << "<ol class=\"history\">\n";
    for (const std::string& h : r.history) os << "<li>" << html_escape(h) << "</li>\n";
    os << "</ol>\n";
  }
}

void section_time(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"time\">Compile time</h2>\n<table class=\"passes\">\n<tr><th>#</th><th>trace</th><th>pass "
        "(provenance)</th><th>ms</th></tr>\n";
  double total = 0;
  int k = 0;
  for (const std::vector<Trace>* list : {&r.traces, &r.backward_traces})
    for (const Trace& t : *list) {
      ++k;
      os << "<tr><td class=\"num\">" << k << "</td><td>" << html_escape(t.name) << "</td><td><a href=\"#pass" << k
         << "\">" << html_escape(t.provenance) << "</a></td><td class=\"num\">" << fmt_ms(t.millis) << "</td></tr>\n";
      total += t.millis;
    }
  os << "<tr><th colspan=\"3\">total</th><td class=\"num\">" << fmt_ms(total) << "</td></tr>\n</table>\n";
  os << "<p class=\"note\">The Fusion pass's time includes building its kernels.</p>\n";
  os << "<h3>Kernels</h3>\n<table class=\"kernels\">\n<tr><th>kernel</th><th>executor</th><th>prims</th>"
        "<th>built</th></tr>\n";
  int n = 0;
  for (const FinalTrace& f : finals(r))
    for (const BoundSymbol& b : f.trace->bsyms) {
      if (!b.kernel) continue;
      ++n;
      // Regions with equal keys share one kernel: only the first is built.
      std::string built = "shared: built before in this process for a region with the same key (" +
                          b.kernel->symbol + ")";
      for (auto it = r.kernel_loads.rbegin(); it != r.kernel_loads.rend(); ++it)
        if (std::find(it->names.begin(), it->names.end(), b.kernel->symbol) != it->names.end()) {
          built = it->compiler + ": " + it->outcome + ", " + fmt_ms(it->ms) + " ms for the library of " +
                  std::to_string(it->names.size()) + " kernel(s) (" + it->library + ")";
          break;
        }
      os << "<tr><td><a href=\"#k-" << html_escape(f.label.substr(0, 3)) << "-" << html_escape(b.fusion_name)
         << "\">" << html_escape(b.fusion_name) << "</a> (" << html_escape(f.label) << ")</td><td>"
         << html_escape(b.executor ? b.executor->name() : "") << "</td><td class=\"num\">" << b.subsymbols.size()
         << "</td><td>" << html_escape(built) << "</td></tr>\n";
    }
  os << "</table>\n";
  if (n == 0) os << "<p class=\"note\">no fused kernels in this program</p>\n";
}

void section_memory(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"memory\">Memory</h2>\n";
  const Trace* fwd = r.traces.empty() ? nullptr : &r.traces.back();
  if (fwd && fwd->kind == Trace::Kind::AugmentedForward && fwd->split < fwd->outputs.size()) {
    const ProxyNames* n = names_in(*fwd);
    size_t total = 0;
    os << "<h3>Saved for backward</h3>\n<table class=\"saved\">\n<tr><th>value</th><th>type</th><th>bytes</th></tr>\n";
    for (size_t i = fwd->split; i < fwd->outputs.size(); ++i) {
      const Tensor& s = fwd->outputs[i];
      total += bytes_of(s);
      os << "<tr><td>" << html_escape(n ? n->name(s) : "?") << "</td><td>" << html_escape(s.meta_str())
         << "</td><td class=\"num\">" << fmt_bytes(bytes_of(s)) << "</td></tr>\n";
    }
    os << "<tr><th colspan=\"2\">" << fwd->outputs.size() - fwd->split << " tensors</th><td class=\"num\">"
       << fmt_bytes(total) << "</td></tr>\n</table>\n";
  } else {
    os << "<p class=\"note\">nothing is saved for a separate backward program here</p>\n";
  }
  os << "<h3>Peak of live intermediates</h3>\n<table>\n";
  for (const FinalTrace& f : finals(r))
    os << "<tr><th>" << html_escape(f.label) << "</th><td class=\"num\">" << fmt_bytes(live_peak(*f.trace))
       << "</td></tr>\n";
  os << "</table>\n<p class=\"note\">Values made by the program and alive at once, freed where the trace says "
        "<code>del</code>; every value counts at its own size (a view is counted as if it were a copy).</p>\n";
  if (r.arena_bytes)
    os << "<p>Memory plan: one arena of <b>" << fmt_bytes(r.arena_bytes)
       << "</b> bytes holds every intermediate of a step (its peak).</p>\n";
}

void section_graphs(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"graph\">The final trace as a graph</h2>\n<p class=\"note\">Boxes are bound symbols, ellipses "
        "inputs, green frames fused regions around their prims, orange notes values saved for backward.</p>\n";
  for (const FinalTrace& f : finals(r)) {
    DotOptions o;
    o.title = f.label;
    if (f.trace == &r.traces.back()) o.sections = r.sections;
    const std::string dot = to_dot(*f.trace, o);
    std::string error;
    const std::string svg = dot_to_svg(dot, &error);
    os << "<h3>" << html_escape(f.label) << "</h3>\n";
    if (!svg.empty()) {
      const size_t at = svg.find("<svg");
      os << "<div class=\"graph\">" << (at == std::string::npos ? svg : svg.substr(at)) << "</div>\n";
    } else {
      os << "<p class=\"note\">No picture: " << html_escape(error) << ". The DOT text below draws it.</p>\n";
    }
    os << "<details><summary>DOT text</summary><pre class=\"dot\">" << html_escape(dot) << "</pre></details>\n";
  }
}

// What a rewrite did to a region, for a reader who sees a GEMM among its prims
// and a kernel that reads the GEMM's output ("" for a plain region).
std::string rewrite_note(const BoundSymbol& region, const ProxyNames* n) {
  if (!is_gemm_epilogue(region)) return "";
  const BoundSymbol& gemm = region.subsymbols.front();
  const std::string product = n && !gemm.outputs.empty() ? n->name(gemm.outputs.front()) : "the product";
  const std::string p = html_escape(product);
  std::string how;
  if (gemm.outputs.front().dtype() != DType::f32)  // a bf16/f16 linear (autocast's forward)
    how = ": the GEMM makes " + p + " whole, as f32 sums (the bias added in f32), into a scratch buffer, and the " +
          std::string(is_row_region(region) ? "row kernel" : "kernel") + " at right reads each sum and rounds it to " +
          dtype_name(gemm.outputs.front().dtype()) + " as it loads <code>in_" + p +
          "</code>: the same values the linear would have stored, without the rounded product in memory.";
  else if (gemm.call.op == OpId::matmul && gemm.call.attrs.flag)  // a bf16 matmul keeping its f32 sums
    how = ": the GEMM makes " + p + " whole into a scratch buffer, and the kernel at right reads it from there.";
  else
    how = ": where the product is large the GEMM makes " + p + " a block at a time (a linear) or in chunks of rows "
          "(a weight gradient at a small batch), and the kernel at right runs on each while it is still in cache, so "
          "<code>in_" + p + "</code> is that part of the product; a small one is made whole, then the kernel runs.";
  return "<p class=\"note rewrite\">The rewrite <b>GEMM epilogues</b> (jit/rewrites/gemm_epilogue.h) put this "
         "region's prims after its " + html_escape(op_name(gemm.call)) + how + "  Without the rewrite "
         "(VOLT_JIT_REWRITES=0) the GEMM writes " + p + " whole and a separate fused kernel reads it back.</p>\n";
}

// What a named rewrite pass does, beside its trace in the pass list.
std::string pass_note(const std::string& provenance) {
  if (provenance == "GEMM epilogues")
    return "A rewrite for speed: the fused region that reads a CPU matmul's or linear's output (its elementwise "
           "work, or under bf16 autocast a LayerNorm's row region) begins with that GEMM, in the GEMM's store "
           "where that pays. VOLT_JIT_REWRITES=0 leaves it out.";
  if (provenance == "Convolution and ReLU")
    return "A rewrite for speed: relu(convolution(...)) becomes one convolution with relu=True, the ReLU "
           "applied to each output tile as the convolution's GEMM stores it. VOLT_JIT_REWRITES=0 leaves it out.";
  return "";
}

// The layer a line belongs to: its scope up to the first numbered module
// ("transformer.h.0" for "transformer.h.0.attn.c_attn"), the whole scope where
// no part is a number ("transformer.ln_f"), "" outside every module.
std::string layer_of(const std::string& scope) {
  for (size_t at = 0; at < scope.size();) {
    const size_t dot = std::min(scope.find('.', at), scope.size());
    const std::string part = scope.substr(at, dot - at);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return scope.substr(0, dot);
    at = dot + 1;
  }
  return scope;
}

std::string region_id(const std::string& label, const BoundSymbol& b) {
  return "k-" + html_escape(label.substr(0, 3)) + "-" + html_escape(b.fusion_name);
}

// One region whole: its prims beside its kernel.
void region_section(std::ostringstream& os, const FinalTrace& f, const BoundSymbol& b) {
  const ProxyNames* n = names_in(*f.trace);
  std::unordered_set<std::string> names;
  if (n) {
    for (const Tensor& t : b.fusion_inputs) names.insert(n->name(t));
    for (const BoundSymbol& p : b.subsymbols)
      for (const Tensor& t : p.outputs) names.insert(n->name(t));
  }
  os << "<section class=\"region\" id=\"" << region_id(f.label, b) << "\" data-fusion=\""
     << html_escape(b.fusion_name) << "\">\n<h3>" << html_escape(b.fusion_name) << " (" << html_escape(f.label)
     << ", " << html_escape(b.executor ? b.executor->name() : "") << ")</h3>\n" << rewrite_note(b, n)
     << "<div class=\"kernel\">\n"
     << "<div><b>prims</b><pre class=\"prims\">" << mark_names(region_text(*f.trace, b), names)
     << "</pre></div>\n<div><b>kernel source</b><pre class=\"source\">" << mark_names(kernel_source_of(b), names)
     << "</pre></div>\n</div>\n</section>\n";
}

// The regions grouped by layer, in the order the layers first run; a region
// whose kernel (equal key) was shown before, as a repeated block's are, is
// one line that links to it.
void section_kernels(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"kernels\">Fused regions and their kernels</h2>\n<p class=\"note\">Grouped by the layer "
        "(module) each region's first prim was called from. Left: the region as the trace prints it. Right: the "
        "kernel generated for it. Values have the same names on both sides; hover one to see it on both. A "
        "region whose kernel is one shown before (a repeated block's) is one line that links to it.</p>\n";
  struct Region {
    const FinalTrace* f;
    const BoundSymbol* b;
  };
  std::vector<std::pair<std::string, std::vector<Region>>> layers;
  const std::vector<FinalTrace> fs = finals(r);
  for (const FinalTrace& f : fs)
    for (const BoundSymbol& b : f.trace->bsyms) {
      if (!b.kernel) continue;
      const std::string layer = layer_of(b.scope);
      auto it = std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l.first == layer; });
      if (it == layers.end()) it = layers.insert(layers.end(), {layer, {}});
      it->second.push_back({&f, &b});
    }
  std::unordered_map<std::string, std::string> shown;  // kernel key -> the region that shows it
  for (const auto& [layer, regions] : layers) {
    int fresh = 0;
    for (const Region& g : regions) fresh += shown.count(g.b->kernel->key) ? 0 : 1;
    const std::string title = layer.empty() ? "the top level (outside every submodule)" : layer;
    os << "<details class=\"layer\" open><summary><b>" << html_escape(title) << "</b>: " << regions.size()
       << " region(s), " << fresh << " kernel(s) not shown above</summary>\n";
    for (const Region& g : regions) {
      auto seen = shown.find(g.b->kernel->key);
      if (seen == shown.end()) {
        shown[g.b->kernel->key] = "<a href=\"#" + region_id(g.f->label, *g.b) + "\">" +
                                  html_escape(g.b->fusion_name) + " (" + html_escape(g.f->label) + ")</a>";
        region_section(os, *g.f, *g.b);
        continue;
      }
      os << "<p class=\"repeat\" id=\"" << region_id(g.f->label, *g.b) << "\"><b>" << html_escape(g.b->fusion_name)
         << "</b> (" << html_escape(g.f->label) << "): the same kernel as " << seen->second << "</p>\n";
    }
    os << "</details>\n";
  }
}

void section_passes(std::ostringstream& os, const CompileRecord& r) {
  os << "<h2 id=\"passes\">Every pass, in order</h2>\n<p class=\"note\">Each trace is what one pass made of the "
        "one before it; the diff shows what the pass added (+), removed (-) or changed.</p>\n";
  int k = 0;
  for (const std::vector<Trace>* list : {&r.traces, &r.backward_traces}) {
    std::string previous;
    for (const Trace& t : *list) {
      const std::string text = t.str();
      ++k;
      os << "<section class=\"pass\" id=\"pass" << k << "\" data-provenance=\"" << html_escape(t.provenance)
         << "\">\n<h3>" << k << ". " << html_escape(t.name) << ": " << html_escape(t.provenance) << " ("
         << fmt_ms(t.millis) << " ms)</h3>\n";
      if (const std::string note = pass_note(t.provenance); !note.empty())
        os << "<p class=\"note rewrite\">" << html_escape(note) << "</p>\n";
      if (!previous.empty()) {
        const std::string d = line_diff(body_of(previous), body_of(text));
        size_t added = 0, removed = 0;
        for (const std::string& l : lines_of(d)) {
          if (l.rfind("+ ", 0) == 0) ++added;
          if (l.rfind("- ", 0) == 0) ++removed;
        }
        os << "<details open><summary>diff against the pass before: +" << added << " -" << removed
           << " lines</summary>\n" << pre_diff(d) << "</details>\n";
      }
      os << "<details" << (previous.empty() ? " open" : "") << "><summary>the trace</summary><pre class=\"trace\">"
         << html_escape(text) << "</pre></details>\n</section>\n";
      previous = text;
    }
  }
}

// What the program computes, in a few words.
std::string program_of(const CompileRecord& r) {
  if (r.kind == "step") return "forward, backward and optimizer in one program";
  if (r.kind == "lazy") return "a lazy graph";
  if (!r.backward_traces.empty()) return "forward, with a backward trace for gradients";
  return "forward only";
}

}  // namespace

std::string render_page(const CompileRecord& r) {
  std::ostringstream os;
  os << page_head("volt " + r.kind + " report: " + r.title);
  os << "<nav><a href=\"index.html\">index</a><a href=\"#why\">why</a><a href=\"#time\">time</a><a "
        "href=\"#memory\">memory</a><a href=\"#graph\">graph</a><a href=\"#kernels\">kernels</a><a "
        "href=\"#passes\">passes</a></nav>\n";
  os << "<h1>" << html_escape(r.title) << "</h1>\n<p>A compiled " << html_escape(r.kind == "lazy" ? "lazy graph" : r.kind == "step" ? "training step" : "jit function")
     << " (" << html_escape(program_of(r)) << "): " << r.traces.size() + r.backward_traces.size()
     << " traces. The first is what tracing recorded, every later one is what a pass made of the one before "
        "it (see <a href=\"#passes\">every pass</a> at the bottom), and the last one runs: its graph and its "
        "kernels are shown first.</p>\n";
  for (const std::string& n : r.notes) os << "<p class=\"note\">" << html_escape(n) << "</p>\n";
  section_why(os, r);
  section_time(os, r);
  section_memory(os, r);
  section_graphs(os, r);
  section_kernels(os, r);
  section_passes(os, r);
  os << "<script>" << kScript << "</script>\n</body>\n</html>\n";
  return os.str();
}

std::string render_index(const std::vector<CompileRecord>& pages) {
  std::ostringstream os;
  os << page_head("volt jit report");
  os << "<h1>volt jit report</h1>\n<p>One page per compiled program, in the order they were compiled (jitted "
        "functions are numbered in the order they first compiled). Open one to follow it from the first trace to "
        "its kernels.</p>\n<table class=\"index\">\n<tr><th>page</th><th>kind</th><th>program</th><th>why "
        "compiled</th><th>passes</th><th>kernels</th><th>compile ms</th></tr>\n";
  for (const CompileRecord& r : pages) {
    double ms = 0;
    int kernels = 0;
    for (const std::vector<Trace>* list : {&r.traces, &r.backward_traces})
      for (const Trace& t : *list) ms += t.millis;
    for (const FinalTrace& f : finals(r))
      for (const BoundSymbol& b : f.trace->bsyms) kernels += b.kernel ? 1 : 0;
    os << "<tr><td><a href=\"" << html_escape(r.file) << "\">" << html_escape(r.title) << "</a></td><td>"
       << html_escape(r.kind) << "</td><td>" << program_of(r) << "</td><td>" << html_escape(r.reason)
       << "</td><td class=\"num\">"
       << r.traces.size() + r.backward_traces.size() << "</td><td class=\"num\">" << kernels
       << "</td><td class=\"num\">" << fmt_ms(ms) << "</td></tr>\n";
  }
  os << "</table>\n</body>\n</html>\n";
  return os.str();
}

}  // namespace volt::jit
