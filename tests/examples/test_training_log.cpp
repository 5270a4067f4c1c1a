// The examples' progress line, JSON log and SVG curves (examples/common/training_log.h).
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "common/training_log.h"

using namespace volt::examples;

TEST_CASE("the progress line: percentage, bar, counts, elapsed<eta and the value") {
  std::string l = Progress::line("train", 3150, 7500, 9.0, 0.41072, "loss");
  CHECK(l == "train  42% [########............]  3150/7500  00:09<00:12  loss 0.4107");
  CHECK(Progress::line("eval", 0, 10, 0.0, 0, nullptr) == "eval   0% [....................]  0/10  00:00<00:00");
  CHECK(clock_str(3725) == "1:02:05");
}

TEST_CASE("off a terminal, progress prints one plain line per tenth of the work") {
  std::ostringstream os;
  Progress p("train", 100, os, /*terminal=*/false);
  for (int i = 1; i <= 100; ++i) p.update(i, 1.0 / i);
  std::string out = os.str();
  CHECK(std::count(out.begin(), out.end(), '\n') == 10);
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find("train 100% [####################]  100/100") != std::string::npos);
}

TEST_CASE("the JSON log has one parseable object per line") {
  auto path = std::filesystem::temp_directory_path() / ("volt_test_log_" + std::to_string(::getpid()) + ".jsonl");
  {
    JsonLog log(path.string());
    log.write({{"step", 1}, {"epoch", 1}, {"loss", 2.5}, {"lr", 1e-3}, {"steps_per_s", 300.0}});
    log.write({{"epoch", 1}, {"accuracy", 95.89}, {"seconds", 21.6}});
  }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["loss"].get<double>() == 2.5);
  CHECK(rows[0]["lr"].get<double>() == 1e-3);
  CHECK(rows[1]["accuracy"].get<double>() == 95.89);
  std::filesystem::remove(path);
  CHECK_THROWS_AS(JsonLog("/nonexistent-dir/x.jsonl"), std::runtime_error);
}

TEST_CASE("the SVG has both curves, every point inside its panel") {
  Curves c;
  for (int i = 0; i < 200; ++i) c.loss.push_back({double(i), 2.3 / (1 + 0.05 * i)});
  c.accuracy = {{1, 95.2}, {2, 97.1}, {3, 97.8}};
  auto path = std::filesystem::temp_directory_path() / ("volt_test_curves_" + std::to_string(::getpid()) + ".svg");
  write_svg(c, path.string());
  std::ifstream in(path);
  std::string svg((std::istreambuf_iterator<char>(in)), {});
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  std::regex poly("points='([^']*)'");
  std::vector<std::string> lines;
  for (std::sregex_iterator it(svg.begin(), svg.end(), poly), end; it != end; ++it) lines.push_back((*it)[1]);
  REQUIRE(lines.size() == 2);
  // Panels: x in [70, 410] and [530, 870], y in [40, 290].
  double xlo[2] = {70, 530}, xhi[2] = {410, 870};
  size_t counts[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    std::istringstream pts(lines[k]);
    std::string p;
    while (pts >> p) {
      double x = std::stod(p.substr(0, p.find(','))), y = std::stod(p.substr(p.find(',') + 1));
      CHECK(x >= xlo[k] - 1e-9);
      CHECK(x <= xhi[k] + 1e-9);
      CHECK(y >= 40 - 1e-9);
      CHECK(y <= 290 + 1e-9);
      ++counts[k];
    }
  }
  CHECK(counts[0] == 200);
  CHECK(counts[1] == 3);
  std::filesystem::remove(path);
}
