#include <volt/utils/curves.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <volt/tensor/error.h>

namespace volt::utils {

Points moving_average(const Points& points, size_t window) {
  VOLT_CHECK(window >= 1, "moving_average", "expected a window of 1 or more points, got " << window);
  Points out;
  out.reserve(points.size());
  double sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    sum += points[i].second;
    if (i >= window) sum -= points[i - window].second;
    out.push_back({points[i].first, sum / double(std::min(i + 1, window))});
  }
  return out;
}

size_t smoothing_window(size_t n) { return std::max<size_t>(1, n / 20); }

std::vector<double> nice_ticks(double lo, double hi, int target) {
  VOLT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "nice_ticks",
             "expected finite lo <= hi, got [" << lo << ", " << hi << "]");
  VOLT_CHECK(target >= 2, "nice_ticks", "expected a target of 2 or more ticks, got " << target);
  // A flat series, or one flat at double precision (ticks could not step
  // through its spread): a range around its value.
  const double scale = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= 1e-9 * scale || hi == lo) {
    const double mid = lo / 2 + hi / 2, half = std::max(1.0, scale * 1e-3);
    lo = mid - half, hi = mid + half;
  }
  const double raw = (hi - lo) / (target - 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw * (1 - 1e-9)) {
      step = m * power;
      break;
    }
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last + 0.5; ++k) ticks.push_back(k * step == 0 ? 0.0 : k * step);
  return ticks;
}

namespace {

struct Box {
  double x0, y0, w, h;
};

// A tick label: the value rounded to the step's decimals ("0.25", "1500").
std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string escaped(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == '\'') r += "&apos;";
    else r += c;
  }
  return r;
}

void frame(std::ostream& os, const Box& b, const std::string& title, const std::string& xlabel,
           const std::string& ylabel) {
  os << "<text x='" << b.x0 + b.w / 2 << "' y='" << b.y0 - 10 << "' text-anchor='middle' font-size='14'>"
     << escaped(title) << "</text>\n";
  os << "<rect x='" << b.x0 << "' y='" << b.y0 << "' width='" << b.w << "' height='" << b.h
     << "' fill='none' stroke='#444'/>\n";
  os << "<text x='" << b.x0 + b.w / 2 << "' y='" << b.y0 + b.h + 36 << "' text-anchor='middle' font-size='12'>"
     << escaped(xlabel) << "</text>\n";
  const double yx = b.x0 - 52, yy = b.y0 + b.h / 2;
  os << "<text x='" << yx << "' y='" << yy << "' text-anchor='middle' font-size='12' transform='rotate(-90 " << yx
     << " " << yy << ")'>" << escaped(ylabel) << "</text>\n";
}

void polyline(std::ostream& os, const Points& pts, const char* colour, double width, double opacity,
              const auto& px, const auto& py) {
  os << "<polyline fill='none' stroke='" << colour << "' stroke-width='" << width << "' stroke-opacity='" << opacity
     << "' points='";
  for (auto [x, y] : pts) os << px(x) << "," << py(y) << " ";
  os << "'/>\n";
}

// One panel: frame, named axes, round ticks, the series (and its smoothed line).
void panel(std::ostream& os, const Box& b, const std::string& title, const std::string& xlabel,
           const std::string& ylabel, const Points& raw, const char* colour, bool smooth) {
  os << "<g>\n";
  frame(os, b, title, xlabel, ylabel);
  Points pts;
  for (const auto& p : raw)
    if (std::isfinite(p.first) && std::isfinite(p.second)) pts.push_back(p);
  if (pts.empty()) {
    os << "<text x='" << b.x0 + b.w / 2 << "' y='" << b.y0 + b.h / 2 << "' text-anchor='middle'>no data</text>\n</g>\n";
    return;
  }
  auto [xl, xh] = std::minmax_element(pts.begin(), pts.end());
  auto [yl, yh] = std::minmax_element(pts.begin(), pts.end(), [](auto& a, auto& c) { return a.second < c.second; });
  const std::vector<double> xt = nice_ticks(xl->first, xh->first), yt = nice_ticks(yl->second, yh->second);
  const double xmin = xt.front(), xmax = xt.back(), ymin = yt.front(), ymax = yt.back();
  auto px = [&](double x) { return b.x0 + (x - xmin) / (xmax - xmin) * b.w; };
  auto py = [&](double y) { return b.y0 + b.h - (y - ymin) / (ymax - ymin) * b.h; };
  for (double v : xt)
    os << "<line x1='" << px(v) << "' y1='" << b.y0 + b.h << "' x2='" << px(v) << "' y2='" << b.y0 + b.h + 5
       << "' stroke='#444'/><text class='xtick' x='" << px(v) << "' y='" << b.y0 + b.h + 18
       << "' text-anchor='middle' font-size='11'>" << tick_label(v, xt[1] - xt[0]) << "</text>\n";
  for (double v : yt)
    os << "<line x1='" << b.x0 - 5 << "' y1='" << py(v) << "' x2='" << b.x0 << "' y2='" << py(v)
       << "' stroke='#444'/><text class='ytick' x='" << b.x0 - 8 << "' y='" << py(v) + 4
       << "' text-anchor='end' font-size='11'>" << tick_label(v, yt[1] - yt[0]) << "</text>\n";
  const bool smoothed = smooth && pts.size() >= 20;
  polyline(os, pts, colour, smoothed ? 1.0 : 1.5, smoothed ? 0.35 : 1.0, px, py);
  if (smoothed) polyline(os, moving_average(pts, smoothing_window(pts.size())), colour, 2.0, 1.0, px, py);
  if (pts.size() <= 50)
    for (auto [x, y] : pts) os << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << colour << "'/>\n";
  os << "</g>\n";
}

}  // namespace

std::string svg(const Curves& c) {
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='360' font-family='sans-serif'>\n"
     << "<rect width='900' height='360' fill='white'/>\n";
  panel(os, {70, 40, 340, 250}, c.loss_title, c.loss_xlabel, c.loss_ylabel, c.loss, "#1f77b4", true);
  panel(os, {530, 40, 340, 250}, c.second_title, c.second_xlabel, c.second_ylabel, c.accuracy, "#d62728", false);
  os << "</svg>\n";
  return os.str();
}

void write_svg(const Curves& curves, const std::string& path) {
  std::ofstream os(path);
  VOLT_CHECK(os.is_open(), "write_svg", "cannot write " << path);
  os << svg(curves);
  VOLT_CHECK(os.good(), "write_svg", "writing " << path << " failed");
}

}  // namespace volt::utils
