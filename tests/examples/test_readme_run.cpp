// README.md quotes a run of examples/mnist_mlp on real MNIST (the block after
// "<!-- run: ARGS -->"). Where MNIST is on this machine ($VOLT_DATA_DIR or
// ~/.cache/volt/mnist, as data/fetch_mnist.sh puts it), the example is run
// with ARGS and every quoted line must be a line it prints, in the quote's
// order, its timings masked.
// Where MNIST is not, the case says so and checks only that the block exists.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_example.h"

namespace fs = std::filesystem;

namespace {

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

TEST_CASE("readme: the quoted MNIST run is what examples/mnist_mlp prints") {
  std::ifstream in(fs::path(VOLT_SOURCE_DIR) / "README.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<std::string> readme = lines_of(ss.str());
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
  MESSAGE("skipped under the sanitizers: a whole epoch instrumented takes minutes");
  return;
#endif
  const std::string dir = mnist_dir();
  if (dir.empty() || !fs::exists(fs::path(dir) / "t10k-labels-idx1-ubyte")) {
    MESSAGE("skipped: no MNIST in " << dir << " (data/fetch_mnist.sh fetches it)");
    return;
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
