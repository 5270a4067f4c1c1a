#include <volt/utils/progress.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <utility>

#include <volt/tensor/error.h>

namespace volt::utils {

std::string clock_str(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(seconds, 0.0) + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                  (long long)(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  }
  return buf;
}

Progress::Progress(std::string label, int64_t total)
    : Progress(std::move(label), total, std::cerr, true) {
  if (!isatty(STDERR_FILENO)) os_ = nullptr;
}

Progress::Progress(std::string label, int64_t total, std::ostream& os, bool terminal)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), os_(&os), terminal_(terminal),
      start_(std::chrono::steady_clock::now()) {
  VOLT_CHECK(total >= 0, "Progress", "'" << label_ << "': expected a total of 0 or more steps, got " << total);
}

std::string Progress::line(const std::string& label, int64_t done, int64_t total, double elapsed, double value,
                           const char* value_name) {
  const int width = 20;
  const double frac = std::clamp(double(done) / double(std::max<int64_t>(total, 1)), 0.0, 1.0);
  const int filled = static_cast<int>(frac * width);
  const double eta = done > 0 ? elapsed * double(std::max<int64_t>(total - done, 0)) / double(done) : 0.0;
  char head[64];
  std::snprintf(head, sizeof head, "%s %3d%% [", label.c_str(), static_cast<int>(frac * 100));
  std::ostringstream s;
  s << head << std::string(filled, '#') << std::string(width - filled, '.') << "]  " << done << "/" << total << "  "
    << clock_str(elapsed) << "<" << clock_str(eta);
  if (value_name) {
    char v[64];
    std::snprintf(v, sizeof v, "  %s %.4f", value_name, value);
    s << v;
  }
  return s.str();
}

void Progress::update(int64_t done, double value, const char* value_name) {
  if (!os_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const char* name = std::isnan(value) ? nullptr : value_name;
  if (terminal_) {
    if (done >= total_ || elapsed - last_draw_ >= 0.1) {
      // \33[K clears what a longer line before left behind.
      *os_ << "\r" << line(label_, done, total_, elapsed, value, name) << "\33[K" << (done >= total_ ? "\n" : "")
           << std::flush;
      last_draw_ = elapsed;
    }
  } else {
    const int64_t tenth = std::min<int64_t>(done, total_) * 10 / total_;
    if (tenth > printed_tenth_) {
      *os_ << line(label_, done, total_, elapsed, value, name) << "\n";
      printed_tenth_ = tenth;
    }
  }
}

}  // namespace volt::utils
