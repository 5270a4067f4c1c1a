// Training curves as an SVG file any browser shows: two panels side by side,
// the training loss by step (each logged value, and a smoothed line through
// them) and a second series (test accuracy by epoch, or a validation loss by
// step), each with named axes and round tick values (0, 0.5, 1, 1.5 ...).
//
//   volt::utils::Curves curves;
//   curves.loss.push_back({double(step), loss});
//   curves.accuracy.push_back({double(epoch), accuracy});
//   volt::utils::write_svg(curves, "curves.svg");
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace volt::utils {

using Points = std::vector<std::pair<double, double>>;  // (x, y)

struct Curves {
  Points loss;      // (global step, training loss)
  Points accuracy;  // (epoch, test accuracy in %), or what second_* say
  std::string loss_title = "training loss", loss_xlabel = "step", loss_ylabel = "loss";
  std::string second_title = "test accuracy (%)", second_xlabel = "epoch", second_ylabel = "accuracy (%)";
};

// The SVG document; write_svg puts it in `path` (a volt::Error if it cannot).
std::string svg(const Curves& curves);
void write_svg(const Curves& curves, const std::string& path);

// The smoothed loss line: each point's y is the mean of the `window` values
// ending at it (fewer at the start).  window(n) is the one the plot uses.
Points moving_average(const Points& points, size_t window);
size_t smoothing_window(size_t n);

// Round tick values covering [lo, hi]: a step of 1, 2 or 5 times a power of
// ten giving about `target` ticks, the first at or below lo, the last at or above hi.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace volt::utils
