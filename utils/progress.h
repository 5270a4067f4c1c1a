// A progress bar for training loops, drawn on standard error and only where
// standard error is a terminal, so redirected output and logs stay clean:
//
//   volt::utils::Progress bar("train", loader.size());
//   for (...) bar.update(step + 1, loss);   // train  42% [########............]  3150/7500  00:09<00:12  loss 0.4107
//
// A stream given explicitly is used as it is told: redrawn in place as a
// terminal, or one plain line per tenth of the work (a log file, a test).
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace volt::utils {

// "mm:ss", or "h:mm:ss" from an hour on (seconds rounded to the nearest).
std::string clock_str(double seconds);

class Progress {
 public:
  // The bar on standard error when it is a terminal; silent otherwise.
  Progress(std::string label, int64_t total);
  // On `os`: redrawn in place when `terminal`, else a plain line per tenth.
  Progress(std::string label, int64_t total, std::ostream& os, bool terminal);

  // "train  42% [########............]  3150/7500  00:09<00:12  loss 0.4107";
  // `value_name` null leaves the value out.
  static std::string line(const std::string& label, int64_t done, int64_t total, double elapsed, double value,
                          const char* value_name);

  // `done` of the total are finished; a NaN value is left out of the line.
  void update(int64_t done, double value = NAN, const char* value_name = "loss");
  bool shown() const { return os_ != nullptr; }

 private:
  std::string label_;
  int64_t total_;
  std::ostream* os_;  // null: nothing is shown
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1;
  int64_t printed_tenth_ = 0;
};

}  // namespace volt::utils
