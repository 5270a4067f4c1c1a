// The volt port of a LibTorch next-character model over padded lines
// (tests/port/volt/charlm.cpp), built here as it is: it learns, a copy loaded
// from its half-way checkpoints (model and optimizer) retrains the second half
// with the same losses, and the padding row of its embedding stays zero.
// Where the LibTorch original has been built (tests/port/compile_libtorch.sh,
// or the path in VOLT_LIBTORCH_CHARLM), both start from one file of weights
// and must print the same losses, step by step.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#define main port_charlm_main
#include "port/volt/charlm.cpp"
#undef main

#include "data/idx_files.h"

namespace {

// What the program prints on standard output (std::cout and printf) while `run` runs.
std::string charlm_stdout(const volt::test::TempDir& dir, const std::function<int()>& run, int& rc) {
  const std::string path = dir / "stdout.txt";
  std::cout.flush();
  std::fflush(stdout);
  const int saved = dup(1);
  FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 1);
  std::string error;
  try {
    rc = run();
  } catch (const std::exception& e) {
    rc = -1;
    error = std::string("exception: ") + e.what() + "\n";
  }
  std::cout.flush();
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  std::fclose(file);
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {}) + error;
}

// The numbers after "<prefix> S ... loss " in step order.
std::vector<double> charlm_losses(const std::string& out, const std::string& prefix) {
  std::vector<double> result;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix + " ", 0) != 0) continue;
    const size_t at = line.find(" loss ");
    if (at != std::string::npos) result.push_back(std::atof(line.c_str() + at + 6));
  }
  return result;
}

double charlm_value(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  return at == std::string::npos ? -1 : std::atof(out.c_str() + at + key.size() + 1);
}

int run_charlm(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv{const_cast<char*>("charlm")};
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  return port_charlm_main(static_cast<int>(argv.size()) - 1, argv.data());
}

// The LibTorch original built from the current source, or "" when there is none.
std::string libtorch_charlm() {
  const char* given = std::getenv("VOLT_LIBTORCH_CHARLM");
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path binary = given ? std::filesystem::path(given)
                                             : std::filesystem::path(tmp ? tmp : "/tmp") / "volt-port-libtorch" / "charlm";
  const std::filesystem::path source = std::filesystem::path(VOLT_SOURCE_DIR) / "tests/port/libtorch/charlm.cpp";
  std::error_code ec;
  if (!std::filesystem::exists(binary, ec)) return "";
  if (std::filesystem::last_write_time(binary, ec) < std::filesystem::last_write_time(source, ec)) return "";
  return binary.string();
}

}  // namespace

TEST_CASE("the volt port of the LibTorch char model learns, resumes from its checkpoints, keeps its padding row") {
  volt::test::TempDir dir;
  int rc = 1;
  const std::string out = charlm_stdout(dir, [&] { return run_charlm({"60", dir.path.string()}); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> curve = charlm_losses(out, "step"), resumed = charlm_losses(out, "resumed step");
  REQUIRE(curve.size() == 60);
  REQUIRE(resumed.size() == 30);
  // Each position has ~26 classes: ln 27 = 3.3 for a uniform guess.
  CHECK(curve.front() > 3.0);
  CHECK(curve.back() < 2.5);
  for (size_t s = 0; s < 30; ++s) CHECK(resumed[s] == curve[30 + s]);
  CHECK(charlm_value(out, "padding row") == 0.0);
  CHECK(charlm_value(out, "eval loss") > 0);
  CHECK(out.find("resumed same") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "charlm_model.pt"));
  CHECK(std::filesystem::exists(dir / "charlm_optimizer.pt"));
}

TEST_CASE("the char model port and its LibTorch original give the same losses from the same weights") {
  volt::test::TempDir dir;
  std::set<char> chars;
  for (const auto& l : kLines) chars.insert(l.begin(), l.end());
  volt::manual_seed(42);
  CharLM model(static_cast<int64_t>(chars.size()) + 1, 16, 32);
  const std::string weights = dir / "weights.f32";
  {
    std::ofstream file(weights, std::ios::binary);
    for (const auto& p : model.named_parameters()) {
      const std::vector<float> v = p.value().contiguous().to_vector<float>();
      file.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    }
  }
  int rc = 1;
  const std::string out = charlm_stdout(dir, [&] { return run_charlm({"20", dir.path.string(), weights}); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> volt_curve = charlm_losses(out, "step");
  REQUIRE(volt_curve.size() == 20);
  // The program really read the file: a truncated one is an error naming the parameter it lacks.
  std::filesystem::resize_file(weights, 100);
  CHECK_THROWS_WITH_AS(run_charlm({"1", dir.path.string(), weights}), doctest::Contains("ends before emb.weight"),
                       std::runtime_error);
  {
    std::ofstream file(weights, std::ios::binary | std::ios::trunc);
    for (const auto& p : model.named_parameters()) {
      const std::vector<float> v = p.value().contiguous().to_vector<float>();
      file.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    }
  }

  const std::string original = libtorch_charlm();
  if (original.empty()) {
    MESSAGE("the LibTorch char model is not built (tests/port/compile_libtorch.sh builds it where LibTorch is "
            "installed); only the volt side was run");
    return;
  }
  const std::string command = original + " 20 " + dir.path.string() + " " + weights + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string theirs;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) theirs.append(buffer, n);
  CHECK(pclose(pipe) == 0);
  INFO(theirs);
  const std::vector<double> torch_curve = charlm_losses(theirs, "step");
  REQUIRE(torch_curve.size() == 20);
  // Both print 6 decimals; the loss moves by about 1 over these steps, and a
  // change to the rule (the smoothing, the padding row's gradient, the
  // schedule) moves it by 1e-3 or more.
  for (size_t s = 0; s < 20; ++s) {
    CAPTURE(s);
    CHECK(std::abs(volt_curve[s] - torch_curve[s]) < 2e-5);
  }
  CHECK(std::abs(charlm_value(out, "eval loss") - charlm_value(theirs, "eval loss")) < 1e-4);
}
