// A training log in JSON Lines: one object per line, flushed as written, so a
// crashed run keeps what it logged and jq or pandas reads the file as it grows.
// Every record has a "type", the global "step" and a "time" (seconds since the
// Unix epoch); "step" records are kept every N steps, the other types always:
//
//   volt::utils::JsonLog log("run.jsonl", /*every=*/100);
//   log.step(global_step, {{"loss", loss}, {"lr", lr}});        // at steps 100, 200, ...
//   log.write("epoch", global_step, {{"accuracy", 97.8}});      // always
//   // {"type":"step","step":100,"time":1795739101.25,"loss":0.41,"lr":0.001}
//
// A default-made log is off: its calls write nothing.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace volt::utils {

// One value of a record: an integer, a number, a string or a flag.
class JsonValue {
 public:
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  JsonValue(T v) : v_(static_cast<int64_t>(v)) {}
  template <class T>
    requires std::is_floating_point_v<T>
  JsonValue(T v) : v_(static_cast<double>(v)) {}
  JsonValue(bool v) : v_(v) {}
  JsonValue(const char* v) : v_(std::string(v)) {}
  JsonValue(std::string v) : v_(std::move(v)) {}
  const std::variant<bool, int64_t, double, std::string>& value() const { return v_; }

 private:
  std::variant<bool, int64_t, double, std::string> v_;
};

using JsonFields = std::vector<std::pair<std::string, JsonValue>>;

class JsonLog {
 public:
  JsonLog() = default;
  // Writes `path` (replaced if it exists); "step" records every `every` steps.
  explicit JsonLog(const std::string& path, int64_t every = 1);
  bool enabled() const { return out_.is_open(); }
  int64_t every() const { return every_; }

  // A "step" record, when `step` is a multiple of every() or `force`; returns whether written.
  bool step(int64_t step, const JsonFields& fields, bool force = false);
  // A record of `type` ("epoch", "eval", ...), always written.
  void write(std::string_view type, int64_t step, const JsonFields& fields);

  // The line write() would add, without its newline (`time` in seconds since the epoch).
  static std::string format(std::string_view type, int64_t step, double time, const JsonFields& fields);

 private:
  std::ofstream out_;
  std::string path_;
  int64_t every_ = 1;
};

}  // namespace volt::utils
