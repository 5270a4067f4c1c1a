// volt/utils: the SVG curves (round ticks, named axes, a smoothed loss line)
// and the model summary (per layer: output shape, parameters, bytes).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include <volt/nn/activation.h>
#include <volt/nn/linear.h>
#include <volt/nn/mlp.h>
#include <volt/nn/sequential.h>
#include <volt/tensor/error.h>
#include <volt/tensor/factories.h>
#include <volt/utils/curves.h>
#include <volt/utils/summary.h>

using namespace volt::utils;

namespace {

std::vector<std::string> all(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  std::vector<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

std::vector<std::pair<double, double>> parse_points(const std::string& s) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(s);
  std::string p;
  while (in >> p) out.push_back({std::stod(p.substr(0, p.find(','))), std::stod(p.substr(p.find(',') + 1))});
  return out;
}

}  // namespace

TEST_CASE("utils: round ticks are 1, 2 or 5 times a power of ten and cover the range") {
  CHECK(nice_ticks(0, 1) == std::vector<double>{0, 0.5, 1});
  const std::vector<double> a = nice_ticks(0.13, 2.31);  // range 2.18 over 4 gaps: 0.545 -> step 1
  CHECK(a == std::vector<double>{0, 1, 2, 3});
  const std::vector<double> b = nice_ticks(1, 7500);  // 1874.75 -> 2000
  CHECK(b == std::vector<double>{0, 2000, 4000, 6000, 8000});
  const std::vector<double> c = nice_ticks(95.2, 97.8);  // 0.65 -> 1
  CHECK(c == std::vector<double>{95, 96, 97, 98});
  const std::vector<double> d = nice_ticks(0.01, 0.09);  // 0.02 -> 0.02
  REQUIRE(d.size() == 6);
  CHECK(d.front() == doctest::Approx(0.0));
  CHECK(d.back() == doctest::Approx(0.1));
  CHECK(nice_ticks(3, 3) == std::vector<double>{2, 2.5, 3, 3.5, 4});  // a flat series gets a range of 2
  // Flat at double precision: still a handful of round ticks around the value.
  const std::vector<double> e = nice_ticks(1000, 1000 + 1e-13);
  CHECK(e.size() <= 6);
  CHECK(e.front() <= 1000);
  CHECK(e.back() >= 1000);
  CHECK(nice_ticks(1e20, 1e20).size() <= 6);
  CHECK_THROWS_AS(nice_ticks(2, 1), volt::Error);
  CHECK_THROWS_AS(nice_ticks(0, NAN), volt::Error);
}

TEST_CASE("utils: the moving average is the mean of the window ending at each point") {
  std::vector<std::pair<double, double>> p;
  for (int i = 0; i < 7; ++i) p.push_back({double(i), double(i * i)});
  const auto m = moving_average(p, 3);
  REQUIRE(m.size() == 7);
  CHECK(m[0].second == 0);
  CHECK(m[1].second == doctest::Approx(0.5));
  CHECK(m[2].second == doctest::Approx((0 + 1 + 4) / 3.0));
  CHECK(m[6].second == doctest::Approx((16 + 25 + 36) / 3.0));
  CHECK(m[6].first == 6);
  CHECK_THROWS_AS(moving_average(p, 0), volt::Error);
}

TEST_CASE("utils: the SVG has both panels, named axes, round tick labels and a smoothed loss line") {
  Curves c;
  for (int i = 0; i < 200; ++i) c.loss.push_back({double(i), 2.3 / (1 + 0.05 * i) + (i % 2 ? 0.1 : -0.1)});
  c.accuracy = {{1, 95.2}, {2, 97.1}, {3, 97.8}};
  auto path = std::filesystem::temp_directory_path() / ("volt_test_curves_" + std::to_string(::getpid()) + ".svg");
  write_svg(c, path.string());
  std::ifstream in(path);
  std::string svg((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove(path);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  for (const char* label : {">training loss<", ">step<", ">loss<", ">test accuracy (%)<", ">epoch<", ">accuracy (%)<"})
    CHECK_MESSAGE(svg.find(label) != std::string::npos, label);
  // The loss panel: x ticks 0, 50, ..., 200; every label a multiple of its step.
  const auto xt = all(svg, "class='xtick'[^>]*>([^<]*)<");
  REQUIRE(xt.size() >= 8);
  CHECK(std::vector<std::string>(xt.begin(), xt.begin() + 5) == std::vector<std::string>{"0", "50", "100", "150", "200"});
  const auto yt = all(svg, "class='ytick'[^>]*>([^<]*)<");
  for (const auto& t : yt) {
    const double v = std::stod(t) * 10;  // each loss and accuracy tick is a multiple of 0.1 or more
    CHECK_MESSAGE(std::abs(v - std::round(v)) < 1e-9, t);
  }
  // Three lines: the raw loss, its smoothed line, the accuracy; each inside its panel.
  const auto lines = all(svg, "points='([^']*)'");
  REQUIRE(lines.size() == 3);
  const auto raw = parse_points(lines[0]), smooth = parse_points(lines[1]), acc = parse_points(lines[2]);
  CHECK(raw.size() == 200);
  CHECK(smooth.size() == 200);
  CHECK(acc.size() == 3);
  for (const auto& [x, y] : raw) CHECK((x >= 70 && x <= 410 && y >= 40 && y <= 290));
  for (const auto& [x, y] : acc) CHECK((x >= 530 && x <= 870 && y >= 40 && y <= 290));
  // The smoothed line maps back to the mean of the last 10 losses (window 200 / 20).
  for (size_t i = 10; i < 200; i += 37) {
    double mean = 0;
    for (size_t k = i - 9; k <= i; ++k) mean += c.loss[k].second;
    mean /= 10;
    // Same map as the raw line: compare with the raw points' pixel/value relation.
    const double scale = (raw[0].second - raw[1].second) / (c.loss[0].second - c.loss[1].second);
    const double expected = raw[0].second + (mean - c.loss[0].second) * scale;
    CHECK(smooth[i].second == doctest::Approx(expected).epsilon(1e-3));
    CHECK(smooth[i].first == doctest::Approx(raw[i].first));
  }
  CHECK_THROWS_WITH_AS(write_svg(c, "/nonexistent-dir/c.svg"), doctest::Contains("cannot write /nonexistent-dir/c.svg"),
                       volt::Error);
}

TEST_CASE("utils: summary gives each layer's output shape, parameters and bytes from one forward") {
  auto net = std::make_shared<volt::nn::MLP>(20, std::vector<int64_t>{16, 4}, 0.5);
  net->train();
  const auto s = summary(*net, volt::zeros({3, 20}));
  REQUIRE(s.layers.size() == net->named_modules().size());
  CHECK(s.layers[0].name == "");
  CHECK(s.layers[0].depth == 0);
  CHECK(s.layers[0].output_shape == std::vector<int64_t>{3, 4});
  const int64_t total = 20 * 16 + 16 + 16 * 4 + 4;
  CHECK(s.layers[0].params == total);
  CHECK(s.layers[0].trainable_params == total);
  CHECK(s.layers[0].param_bytes == total * 4);
  int linears = 0;
  for (const auto& l : s.layers) {
    CAPTURE(l.name);
    CHECK(l.called);  // every layer of the MLP is reached, though eager Sequential fuses them otherwise
    if (l.type == "Linear") {
      const int64_t out = linears == 0 ? 16 : 4, in = linears == 0 ? 20 : 16;
      CHECK(l.output_shape == std::vector<int64_t>{3, out});
      CHECK(l.params == in * out + out);
      CHECK(l.output_bytes == 3 * out * 4);
      CHECK(l.depth == 1);
      ++linears;
    }
  }
  CHECK(linears == 2);
  CHECK(net->is_training());  // the mode is given back
  const std::string table = s.table();
  CHECK(table.find("layer (type)") != std::string::npos);
  CHECK(table.find("(Linear)") != std::string::npos);
  CHECK(table.find("[3, 16]") != std::string::npos);
  CHECK(table.find("params: " + grouped(total) + " (" + grouped(total) + " trainable)") != std::string::npos);
  CHECK(grouped(1234567) == "1,234,567");
  CHECK(grouped(-1000) == "-1,000");
  CHECK(human_bytes(512) == "512 B");
  CHECK(human_bytes(814080) == "795.0 KiB");
  CHECK(human_bytes(3 * 1024 * 1024) == "3.0 MiB");
  CHECK_THROWS_AS(summary(*net, volt::Tensor()), volt::Error);
  CHECK_THROWS(summary(*net, volt::zeros({3, 7})));  // the model's own shape error
}
