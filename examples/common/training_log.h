// What a training run shows and leaves behind, shared by the examples:
//
//   Progress bar("train", steps);            // a bar on a terminal, plain lines elsewhere
//   JsonLog log("run.jsonl");                // one JSON object per line (nlohmann::json)
//   Curves curves;                           // what --plot draws
//   for (...) {
//     bar.update(step + 1, loss);
//     log.step({{"step", step}, {"epoch", 1}, {"loss", loss}, {"lr", lr}, {"steps_per_s", rate}});
//     curves.loss.push_back({double(step), loss});
//   }
//   curves.accuracy.push_back({1, 95.9});
//   write_svg(curves, "curves.svg");         // loss and accuracy, readable in any browser
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace volt::examples {

inline std::string clock_str(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  }
  return buf;
}

// One line of progress: "train  42% [########............]  3150/7500  00:09<00:12  loss 0.4107".
// On a terminal the line is redrawn in place; elsewhere (a log file, CI) a plain
// line is printed at every tenth of the work, so logs stay short.
class Progress {
 public:
  Progress(std::string label, int64_t total, std::ostream& os = std::cout, bool terminal = isatty(STDOUT_FILENO))
      : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), os_(os), terminal_(terminal),
        start_(std::chrono::steady_clock::now()) {}

  static std::string line(const std::string& label, int64_t done, int64_t total, double elapsed, double value,
                          const char* value_name) {
    const int width = 20;
    double frac = std::clamp(double(done) / double(std::max<int64_t>(total, 1)), 0.0, 1.0);
    int filled = static_cast<int>(frac * width);
    double eta = done > 0 ? elapsed * double(total - done) / double(done) : 0.0;
    char head[64];
    std::snprintf(head, sizeof head, "%s %3d%% [", label.c_str(), static_cast<int>(frac * 100));
    std::ostringstream s;
    s << head << std::string(filled, '#') << std::string(width - filled, '.') << "]  " << done << "/" << total << "  "
      << clock_str(elapsed) << "<" << clock_str(eta);
    if (value_name) {
      char v[48];
      std::snprintf(v, sizeof v, "  %s %.4f", value_name, value);
      s << v;
    }
    return s.str();
  }

  void update(int64_t done, double value = NAN, const char* value_name = "loss") {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const char* name = std::isnan(value) ? nullptr : value_name;
    if (terminal_) {
      if (done == total_ || elapsed - last_draw_ >= 0.1) {
        os_ << "\r" << line(label_, done, total_, elapsed, value, name) << (done == total_ ? "\n" : "") << std::flush;
        last_draw_ = elapsed;
      }
    } else {
      int64_t tenth = done * 10 / total_;
      if (tenth > printed_tenth_) {
        os_ << line(label_, done, total_, elapsed, value, name) << "\n";
        printed_tenth_ = tenth;
      }
    }
  }

 private:
  std::string label_;
  int64_t total_;
  std::ostream& os_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1;
  int64_t printed_tenth_ = 0;
};

// JSON Lines: one object per logged step or epoch, flushed as written, so a
// crashed run keeps what it logged and `jq` or pandas reads it as it grows.
class JsonLog {
 public:
  JsonLog() = default;
  explicit JsonLog(const std::string& path) : out_(path) {
    if (!out_) throw std::runtime_error("--log-json: cannot write " + path);
  }
  bool enabled() const { return out_.is_open(); }
  void write(const nlohmann::json& record) {
    if (enabled()) out_ << record.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

struct Curves {
  std::vector<std::pair<double, double>> loss;      // (step, training loss)
  std::vector<std::pair<double, double>> accuracy;  // (epoch, test accuracy in %), or what the titles say
  std::string second_title = "test accuracy (%)", second_xlabel = "epoch";  // the right panel's
};

namespace detail {
// One panel: axes, five ticks a side with labels, the series as a polyline and dots.
inline void svg_panel(std::ostream& os, double x0, double y0, double w, double h, const std::string& title,
                      const std::string& xlabel, const std::vector<std::pair<double, double>>& pts,
                      const char* colour) {
  os << "<g>\n<text x='" << x0 + w / 2 << "' y='" << y0 - 10 << "' text-anchor='middle' font-size='14'>" << title
     << "</text>\n";
  os << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
     << "' fill='none' stroke='#444'/>\n";
  if (pts.empty()) {
    os << "<text x='" << x0 + w / 2 << "' y='" << y0 + h / 2 << "' text-anchor='middle'>no data</text>\n</g>\n";
    return;
  }
  double xmin = pts.front().first, xmax = xmin, ymin = pts.front().second, ymax = ymin;
  for (auto [x, y] : pts) {
    xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
  }
  if (xmax == xmin) xmin -= 1, xmax += 1;
  if (ymax == ymin) ymin -= 1, ymax += 1;
  auto px = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * w; };
  auto py = [&](double y) { return y0 + h - (y - ymin) / (ymax - ymin) * h; };
  for (int i = 0; i <= 4; ++i) {
    double xv = xmin + (xmax - xmin) * i / 4, yv = ymin + (ymax - ymin) * i / 4;
    char xs[32], ys[32];
    std::snprintf(xs, sizeof xs, "%g", std::round(xv * 100) / 100);
    std::snprintf(ys, sizeof ys, "%.3g", yv);
    os << "<line x1='" << px(xv) << "' y1='" << y0 + h << "' x2='" << px(xv) << "' y2='" << y0 + h + 5
       << "' stroke='#444'/><text x='" << px(xv) << "' y='" << y0 + h + 18
       << "' text-anchor='middle' font-size='11'>" << xs << "</text>\n";
    os << "<line x1='" << x0 - 5 << "' y1='" << py(yv) << "' x2='" << x0 << "' y2='" << py(yv)
       << "' stroke='#444'/><text x='" << x0 - 8 << "' y='" << py(yv) + 4
       << "' text-anchor='end' font-size='11'>" << ys << "</text>\n";
  }
  os << "<text x='" << x0 + w / 2 << "' y='" << y0 + h + 36 << "' text-anchor='middle' font-size='12'>" << xlabel
     << "</text>\n";
  os << "<polyline fill='none' stroke='" << colour << "' stroke-width='1.5' points='";
  for (auto [x, y] : pts) os << px(x) << "," << py(y) << " ";
  os << "'/>\n";
  if (pts.size() <= 50) {
    for (auto [x, y] : pts) os << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << colour << "'/>\n";
  }
  os << "</g>\n";
}
}  // namespace detail

// Two panels side by side: training loss by step, and test accuracy by epoch
// (or the series the titles name: a GPT's validation loss by step).
inline void write_svg(const Curves& c, const std::string& path) {
  std::ofstream os(path);
  if (!os) throw std::runtime_error("--plot: cannot write " + path);
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='360' font-family='sans-serif'>\n"
     << "<rect width='900' height='360' fill='white'/>\n";
  detail::svg_panel(os, 70, 40, 340, 250, "training loss", "step", c.loss, "#1f77b4");
  detail::svg_panel(os, 530, 40, 340, 250, c.second_title, c.second_xlabel, c.accuracy, "#d62728");
  os << "</svg>\n";
}

}  // namespace volt::examples
