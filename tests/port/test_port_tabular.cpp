// The volt port of a LibTorch tabular program with two heads
// (tests/port/volt/tabular.cpp: SmoothL1Loss and BCEWithLogitsLoss, BatchNorm1d
// and Dropout in a Sequential, randperm minibatches picked with index({rows}),
// RMSprop with momentum), built here as it is: it learns, and the model it
// saves scores the same once loaded.  Where the LibTorch original has been
// built (tests/port/compile_libtorch.sh, or the path in VOLT_LIBTORCH_TABULAR),
// both start from one file of weights, without dropout and in the rows' order
// (both draw from their own generators), and must print the same losses.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#define main port_tabular_main
#include "port/volt/tabular.cpp"
#undef main

#include "port/port_run.h"

namespace {

using namespace volt::test::port;

int run_tabular(const std::vector<std::string>& args) { return run_main(port_tabular_main, "tabular", args); }

}  // namespace

TEST_CASE("the volt port of the LibTorch tabular program learns both heads and reloads its model") {
  volt::test::TempDir dir;
  int rc = 1;
  const std::string out = captured_stdout(dir, [&] { return run_tabular({"10", dir.path.string()}); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> curve = losses(out, "step");
  REQUIRE(curve.size() == 60);  // 10 epochs of 6 minibatches
  double early = 0, late = 0;
  for (size_t s = 0; s < 6; ++s) early += curve[s] / 6, late += curve[54 + s] / 6;
  CHECK(late < 0.6 * early);
  CHECK(out.find("reloaded same") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "tabular_model.pt"));
  // The last epoch's test rows: the price within a few tenths, the label mostly right.
  const size_t last_epoch = out.rfind("epoch 9 ");
  REQUIRE(last_epoch != std::string::npos);
  CHECK(value_after(out.substr(last_epoch), "mse") < 0.5);
  CHECK(value_after(out.substr(last_epoch), "accuracy") > 0.75);
}

TEST_CASE("the tabular port and its LibTorch original give the same losses from the same weights") {
  volt::test::TempDir dir;
  volt::manual_seed(7);
  TabularNet model(4 + kCategories, 32, 0.0);
  const std::string weights = dir / "weights.f32";
  write_weights(model, weights);
  const std::vector<std::string> args{"4", dir.path.string(), weights, "0", "0"};
  int rc = 1;
  const std::string out = captured_stdout(dir, [&] { return run_tabular(args); }, rc);
  INFO(out);
  CHECK(rc == 0);
  const std::vector<double> volt_curve = losses(out, "step");
  REQUIRE(volt_curve.size() == 24);
  // The program really read the file: a truncated one is an error naming the parameter it lacks.
  std::filesystem::resize_file(weights, 100);
  CHECK_THROWS_WITH_AS(run_tabular(args), doctest::Contains("ends before body.0.weight"), std::runtime_error);
  write_weights(model, weights);

  const std::string original = libtorch_binary("VOLT_LIBTORCH_TABULAR", "tabular");
  if (original.empty()) {
    MESSAGE("the LibTorch tabular program is not built (tests/port/compile_libtorch.sh builds it where LibTorch is "
            "installed); only the volt side was run");
    return;
  }
  int their_rc = 1;
  const std::string theirs = command_output(original + " 4 " + dir.path.string() + " " + weights + " 0 0", their_rc);
  CHECK(their_rc == 0);
  INFO(theirs);
  const std::vector<double> torch_curve = losses(theirs, "step");
  REQUIRE(torch_curve.size() == 24);
  // Both print 6 decimals; a change to either loss's rule (beta, pos_weight),
  // to BatchNorm1d's statistics or to RMSprop's moves a loss by 1e-3 or more.
  for (size_t s = 0; s < 24; ++s) {
    CAPTURE(s);
    CHECK(std::abs(volt_curve[s] - torch_curve[s]) < 2e-5);
  }
  for (int e = 0; e < 4; ++e) {
    const std::string key = "epoch " + std::to_string(e) + " test";
    const std::string mine = out.substr(out.find(key)), their = theirs.substr(theirs.find(key));
    CHECK(std::abs(value_after(mine, "mse") - value_after(their, "mse")) < 1e-4);
    CHECK(value_after(mine, "accuracy") == value_after(their, "accuracy"));
  }
}
