// volt/utils: the progress line and the JSON-lines training log.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <volt/tensor/error.h>
#include <volt/utils/json_log.h>
#include <volt/utils/progress.h>

using namespace volt::utils;

TEST_CASE("utils: the progress line: percentage, bar, counts, elapsed<eta and the value") {
  std::string l = Progress::line("train", 3150, 7500, 9.0, 0.41072, "loss");
  CHECK(l == "train  42% [########............]  3150/7500  00:09<00:12  loss 0.4107");
  CHECK(Progress::line("eval", 0, 10, 0.0, 0, nullptr) == "eval   0% [....................]  0/10  00:00<00:00");
  CHECK(clock_str(3725) == "1:02:05");
  CHECK(clock_str(59.4) == "00:59");
}

TEST_CASE("utils: off a terminal, a progress given a stream prints one plain line per tenth of the work") {
  std::ostringstream os;
  Progress p("train", 100, os, /*terminal=*/false);
  for (int i = 1; i <= 100; ++i) p.update(i, 1.0 / i);
  std::string out = os.str();
  CHECK(std::count(out.begin(), out.end(), '\n') == 10);
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find("train 100% [####################]  100/100") != std::string::npos);
}

TEST_CASE("utils: on a terminal the bar is redrawn in place and ends with one newline") {
  std::ostringstream os;
  Progress p("eval", 3, os, /*terminal=*/true);
  for (int i = 1; i <= 3; ++i) p.update(i);
  const std::string out = os.str();
  CHECK(out.rfind('\r', 0) == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(out.find("eval 100% [####################]  3/3") != std::string::npos);
  CHECK_THROWS_AS(Progress("x", -1, os, false), volt::Error);
}

TEST_CASE("utils: the default progress draws on standard error only when it is a terminal") {
  // The test runner's standard error is a file or a pipe under ctest; where it
  // is a terminal the bar is shown.
  CHECK(Progress("train", 10).shown() == (isatty(STDERR_FILENO) == 1));
}

TEST_CASE("utils: the JSON log: one object per line with type, step and time; steps every N") {
  auto path = std::filesystem::temp_directory_path() / ("volt_test_log_" + std::to_string(::getpid()) + ".jsonl");
  const double before = double(std::time(nullptr));
  {
    JsonLog log(path.string(), 100);
    for (int64_t s = 1; s <= 250; ++s) log.step(s, {{"loss", 2.5 / s}, {"epoch", 1}, {"lr", 1e-3}});
    CHECK(log.step(250, {{"loss", 0.01}}, /*force=*/true));
    CHECK_FALSE(log.step(251, {{"loss", 0.01}}));
    log.write("epoch", 250, {{"accuracy", 95.89}, {"name", "mlp"}, {"resumed", false}, {"samples", size_t{60000}}});
  }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 4);
  CHECK(rows[0]["type"] == "step");
  CHECK(rows[0]["step"] == 100);
  CHECK(rows[1]["step"] == 200);
  CHECK(rows[2]["step"] == 250);
  CHECK(rows[0]["loss"].get<double>() == 2.5 / 100);
  CHECK(rows[0]["epoch"].is_number_integer());
  CHECK(rows[0]["lr"].get<double>() == 1e-3);
  CHECK(rows[3]["type"] == "epoch");
  CHECK(rows[3]["accuracy"].get<double>() == 95.89);
  CHECK(rows[3]["name"] == "mlp");
  CHECK(rows[3]["resumed"] == false);
  CHECK(rows[3]["samples"] == 60000);
  for (const auto& r : rows) {
    CHECK(r["time"].get<double>() >= before - 1);
    CHECK(r["time"].get<double>() <= double(std::time(nullptr)) + 1);
  }
  std::filesystem::remove(path);
}

TEST_CASE("utils: the JSON log's record text, and its errors") {
  CHECK(JsonLog::format("eval", 7, 1.5, {{"val_loss", 2.25}}) ==
        R"({"type":"eval","step":7,"time":1.5,"val_loss":2.25})");
  CHECK(JsonLog::format("step", 1, 0, {{"loss", std::nan("")}}) == R"({"type":"step","step":1,"time":0.0,"loss":null})");
  CHECK_THROWS_WITH_AS(JsonLog::format("step", 1, 0, {{"step", 3}}), doctest::Contains("'step' is set by the log"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(JsonLog::format("step", 1, 0, {{"a", 1}, {"a", 2}}), doctest::Contains("given twice"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(JsonLog("/nonexistent-dir/x.jsonl"), doctest::Contains("cannot write /nonexistent-dir/x.jsonl"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(JsonLog("x.jsonl", 0), doctest::Contains("every >= 1"), volt::Error);
  JsonLog off;
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.step(100, {{"loss", 1.0}}));
}
