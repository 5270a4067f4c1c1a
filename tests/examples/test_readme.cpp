// The README cannot drift either: its worked traces are lines of the golden
// traces (tests/golden, pinned by test_golden_traces.cpp), every file of its
// reading path exists, every page it links exists, and it stays a guide
// (about 400 lines; the reference pages live in docs/).  Its quoted run of
// examples/mnist_mlp on real MNIST (the block after "<!-- run: ARGS -->") is
// run again where MNIST is on this machine ($VOLT_DATA_DIR or
// ~/.cache/volt/mnist): every quoted line must be one it prints, in the
// quote's order, its timings masked; elsewhere the case says it skipped.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_example.h"
#include "tests/skip.h"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A quoted line as a pattern over a golden line: any proxy name (t12) for a
// proxy name (the golden files renumber them), "..." standing for any text.
std::regex pattern_of(const std::string& quoted) {
  const std::string masked = std::regex_replace(quoted, std::regex("\\bt[0-9]+\\b"), "\x01");
  std::string re;
  for (size_t i = 0; i < masked.size(); ++i) {
    if (masked[i] == '\x01') {
      re += "t[0-9]+";
    } else if (masked.compare(i, 3, "...") == 0) {
      re += ".*";
      i += 2;
    } else if (std::string("\\^$.|?*+()[]{}").find(masked[i]) != std::string::npos) {
      re += std::string("\\") + masked[i];
    } else {
      re += masked[i];
    }
  }
  return std::regex(re);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> r;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

// Durations and rates vary from run to run: "16.58 s", "452.3 steps/s", "717.5 ms".
std::string mask_timings(const std::string& line) {
  return std::regex_replace(line, std::regex("[0-9]+(\\.[0-9]+)? (s|ms|steps/s)\\b"), "# $2");
}

std::string mnist_dir() {
  if (const char* d = std::getenv("VOLT_DATA_DIR")) return d;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.cache/volt/mnist" : std::string();
}

}  // namespace

TEST_CASE("readme: the worked traces are lines of the golden traces, in order") {
  const fs::path root = VOLT_SOURCE_DIR;
  const std::vector<std::string> readme = read_lines(root / "README.md");
  const std::regex marker("<!-- trace: ([a-z_]+\\.txt) -->");
  int blocks = 0;
  for (size_t i = 0; i < readme.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(readme[i], m, marker)) continue;
    ++blocks;
    const std::vector<std::string> golden = read_lines(root / "tests" / "golden" / m[1].str());
    REQUIRE(i + 1 < readme.size());
    REQUIRE(readme[i + 1].rfind("```", 0) == 0);
    size_t at = 0;  // the golden line after the last one matched
    for (size_t k = i + 2; k < readme.size() && readme[k] != "```"; ++k) {
      const std::string& q = readme[k];
      if (q.find_first_not_of(' ') == std::string::npos || q.substr(q.find_first_not_of(' ')) == "...") continue;
      const std::regex re = pattern_of(q);
      size_t found = at;
      while (found < golden.size() && !std::regex_match(golden[found], re)) ++found;
      CHECK_MESSAGE(found < golden.size(), "README.md line " << k + 1 << " is not in tests/golden/" << m[1].str()
                                                               << " (after line " << at << "): " << q);
      if (found < golden.size()) at = found + 1;
    }
  }
  CHECK(blocks >= 1);
}

TEST_CASE("readme: the reading path's files and the linked pages exist; the page stays a guide") {
  const fs::path root = VOLT_SOURCE_DIR;
  const std::vector<std::string> readme = read_lines(root / "README.md");
  const std::regex step("^([0-9]+)\\. `([^`]+)` .*");
  const std::regex link("\\]\\(((docs|bench)/[^)#]+)\\)");
  int steps = 0;
  for (const std::string& l : readme) {
    std::smatch m;
    if (std::regex_match(l, m, step)) {
      ++steps;
      CHECK_MESSAGE(fs::exists(root / m[2].str()), "the reading path names " << m[2].str() << ", which does not exist");
    }
    for (std::sregex_iterator it(l.begin(), l.end(), link), end; it != end; ++it)
      CHECK_MESSAGE(fs::exists(root / (*it)[1].str()), "README.md links " << (*it)[1].str() << ", which does not exist");
  }
  CHECK(steps >= 1);
  CHECK_MESSAGE(steps <= 12, "the reading path has " << steps << " files; keep it within 12");
  CHECK_MESSAGE(readme.size() <= 400, "README.md has " << readme.size()
                                                        << " lines; move reference material to docs/");
}

TEST_CASE("readme: the quoted MNIST run is what examples/mnist_mlp prints") {
  const std::vector<std::string> readme = read_lines(fs::path(VOLT_SOURCE_DIR) / "README.md");
  const std::regex marker("<!-- run: mnist_mlp (.*) -->");
  std::string args;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < readme.size() && args.empty(); ++i) {
    std::smatch m;
    if (!std::regex_match(readme[i], m, marker)) continue;
    args = m[1].str();
    REQUIRE(i + 1 < readme.size());
    REQUIRE(readme[i + 1].rfind("```", 0) == 0);
    for (size_t k = i + 2; k < readme.size() && readme[k] != "```" && readme[k] != "..."; ++k)
      quoted.push_back(readme[k]);
  }
  REQUIRE_MESSAGE(!args.empty(), "README.md has no <!-- run: mnist_mlp ARGS --> block");
  REQUIRE(quoted.size() >= 4);
#if defined(__SANITIZE_ADDRESS__)
  VOLT_SKIP("under the sanitizers: a whole epoch instrumented takes minutes");
#endif
  const std::string dir = mnist_dir();
  if (dir.empty() || !fs::exists(fs::path(dir) / "t10k-labels-idx1-ubyte")) {
    VOLT_SKIP("no MNIST in " + dir + " (data/fetch_mnist.sh fetches it)");
  }
  const auto r = volt::testing::run_example("mnist_mlp " + args + " --data-dir " + dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // The quote is an excerpt: its lines appear in the output in its order (the
  // model's printout and the progress bars between them are left out).
  const std::vector<std::string> got = lines_of(r.out);
  size_t at = 0;
  for (const std::string& q : quoted) {
    size_t found = at;
    while (found < got.size() && mask_timings(got[found]) != mask_timings(q)) ++found;
    CHECK_MESSAGE(found < got.size(), "README.md quotes a line the run does not print (after its line " << at
                                                                                               << "): " << q);
    if (found < got.size()) at = found + 1;
  }
}
