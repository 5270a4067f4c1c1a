// The volt port of a LibTorch next-character model over padded lines
// (tests/port/volt/charlm.cpp), built here as it is: it learns, a copy loaded
// from its half-way checkpoints (model and optimizer) retrains the second half
// with the same losses, and the padding row of its embedding stays zero.
// Where the LibTorch original has been built (tests/port/compile_libtorch.sh,
// or the path in VOLT_LIBTORCH_CHARLM), both start from one file of weights
// and must print the same losses, step by step.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#define main port_charlm_main
#include "port/volt/charlm.cpp"
#undef main

#include "port/port_run.h"

namespace {

using namespace volt::test::port;

int run_charlm(const std::vector<std::string>& args) { return run_main(port_charlm_main, "charlm", args); }

}  // namespace

TEST_CASE("the volt port of the LibTorch char model learns, resumes from its checkpoints, keeps its padding row") {
  volt::test::TempDir dir;
  int rc = 1;
  const std::string out = captured_stdout(dir, [&] { return run_charlm({"60", dir.path.string()}); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> curve = losses(out, "step"), resumed = losses(out, "resumed step");
  REQUIRE(curve.size() == 60);
  REQUIRE(resumed.size() == 30);
  // Each position has ~26 classes: ln 27 = 3.3 for a uniform guess.
  CHECK(curve.front() > 3.0);
  CHECK(curve.back() < 2.5);
  for (size_t s = 0; s < 30; ++s) CHECK(resumed[s] == curve[30 + s]);
  CHECK(value_after(out, "padding row") == 0.0);
  CHECK(value_after(out, "eval loss") > 0);
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
  write_weights(model, weights);
  int rc = 1;
  const std::string out = captured_stdout(dir, [&] { return run_charlm({"20", dir.path.string(), weights}); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> volt_curve = losses(out, "step");
  REQUIRE(volt_curve.size() == 20);
  // The program really read the file: a truncated one is an error naming the parameter it lacks.
  std::filesystem::resize_file(weights, 100);
  CHECK_THROWS_WITH_AS(run_charlm({"1", dir.path.string(), weights}), doctest::Contains("ends before emb.weight"),
                       std::runtime_error);
  write_weights(model, weights);

  const std::string original = libtorch_binary("VOLT_LIBTORCH_CHARLM", "charlm");
  if (original.empty()) {
    MESSAGE("the LibTorch char model is not built (tests/port/compile_libtorch.sh builds it where LibTorch is "
            "installed); only the volt side was run");
    return;
  }
  int their_rc = 1;
  const std::string theirs = command_output(original + " 20 " + dir.path.string() + " " + weights, their_rc);
  CHECK(their_rc == 0);
  INFO(theirs);
  const std::vector<double> torch_curve = losses(theirs, "step");
  REQUIRE(torch_curve.size() == 20);
  // Both print 6 decimals; the loss moves by about 1 over these steps, and a
  // change to the rule (the smoothing, the padding row's gradient, the
  // schedule) moves it by 1e-3 or more.
  for (size_t s = 0; s < 20; ++s) {
    CAPTURE(s);
    CHECK(std::abs(volt_curve[s] - torch_curve[s]) < 2e-5);
  }
  CHECK(std::abs(value_after(out, "eval loss") - value_after(theirs, "eval loss")) < 1e-4);
}
