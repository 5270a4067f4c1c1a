// Structural checks of a jit report page against the record it was made from
// (shared by test_report.cpp and test_report_browser.cpp).
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <volt/jit/inspect/dot.h>
#include <volt/jit/inspect/report.h>

namespace report_checks {

inline std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The text of HTML: tags dropped, the five entities decoded.
inline std::string text_of(const std::string& html) {
  std::string s = std::regex_replace(html, std::regex("<[^>]*>"), "");
  for (auto [from, to] : {std::pair<const char*, const char*>{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                          {"&#39;", "'"}, {"&amp;", "&"}})
    s = std::regex_replace(s, std::regex(from), to);
  return s;
}

// The inside of the first <pre class="cls"> after `from`.
inline std::string pre_after(const std::string& page, size_t from, const std::string& cls) {
  const std::string open = "<pre class=\"" + cls + "\">";
  size_t a = page.find(open, from);
  if (a == std::string::npos) return "";
  a += open.size();
  return page.substr(a, page.find("</pre>", a) - a);
}

inline bool has_word(const std::string& text, const std::string& word) {
  return std::regex_search(text, std::regex("(^|[^A-Za-z0-9_])" + word + "($|[^A-Za-z0-9_])"));
}

inline void check_page(const std::string& page, const volt::jit::CompileRecord& r) {
  using volt::jit::html_escape;
  for (const char* id : {"why", "time", "memory", "graph", "kernels", "passes"})
    CHECK_MESSAGE(page.find("id=\"" + std::string(id) + "\"") != std::string::npos, "section " << id);
  // Every pass, in order, with its whole trace.
  size_t at = 0;
  int k = 0;
  for (const std::vector<volt::jit::Trace>* list : {&r.traces, &r.backward_traces})
    for (const volt::jit::Trace& t : *list) {
      const std::string head = "<section class=\"pass\" id=\"pass" + std::to_string(++k) + "\" data-provenance=\"" +
                               html_escape(t.provenance) + "\">";
      const size_t found = page.find(head, at);
      CHECK_MESSAGE(found != std::string::npos, "pass " << k << " (" << t.provenance << ") missing or out of order");
      if (found == std::string::npos) continue;
      at = found;
      CHECK(text_of(pre_after(page, found, "trace")) == t.str());
    }
  CHECK(count(page, "<section class=\"pass\"") == static_cast<size_t>(k));
  // Every kernel beside its region; every value the kernel names is one of the region's.
  size_t kernels = 0, repeats = 0;
  for (const std::vector<volt::jit::Trace>* list : {&r.traces, &r.backward_traces}) {
    if (list->empty()) continue;
    for (const volt::jit::BoundSymbol& b : list->back().bsyms) {
      const std::string source = volt::jit::kernel_source_of(b);
      if (source.empty()) continue;
      ++kernels;
      INFO(b.fusion_name);
      // Forward and backward both start at fusion 0: take the region whose source matches.
      size_t region = std::string::npos;
      std::string prims;
      for (size_t p = page.find("data-fusion=\"" + b.fusion_name + "\""); p != std::string::npos;
           p = page.find("data-fusion=\"" + b.fusion_name + "\"", p + 1))
        if (text_of(pre_after(page, p, "source")) == source) {
          region = p;
          prims = text_of(pre_after(page, p, "prims"));
        }
      if (region == std::string::npos) {
        // A repeated block's region: one line naming the region shown whole, whose kernel has the same key.
        const size_t line = page.find("-" + b.fusion_name + "\"><b>" + b.fusion_name + "</b>");
        REQUIRE_MESSAGE(line != std::string::npos, "kernel " << b.fusion_name << " missing from the page");
        ++repeats;
        continue;
      }
      CHECK(prims.find(b.fusion_name + "(") != std::string::npos);
      std::regex decl("(?:\\bin_|\\bout_|const [a-z_0-9 ]+ )([A-Za-z_][A-Za-z0-9_]*)(?: = |\\[| =)");
      size_t names = 0;
      for (std::sregex_iterator it(source.begin(), source.end(), decl), end; it != end; ++it) {
        const std::string name = (*it)[1];
        CHECK_MESSAGE(has_word(prims, name), "kernel value " << name << " is not in its region:\n" << prims);
        ++names;
      }
      CHECK(names > 0);
    }
  }
  CHECK(count(page, "<section class=\"region\"") == kernels - repeats);
  CHECK(count(page, "<p class=\"repeat\"") == repeats);
  if (volt::jit::graphviz_available()) CHECK(page.find("<div class=\"graph\"><svg") != std::string::npos);
  else CHECK(page.find("No picture") != std::string::npos);
}

}  // namespace report_checks
