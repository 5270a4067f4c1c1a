#include <volt/utils/json_log.h>

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include <volt/tensor/error.h>

namespace volt::utils {

namespace {

const char* const kReserved[] = {"type", "step", "time"};

nlohmann::ordered_json to_json(const JsonValue& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(x)>;
        // JSON has no NaN or infinity: a non-finite number is written as null.
        if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(x)) return nullptr;
        }
        return x;
      },
      v.value());
}

}  // namespace

JsonLog::JsonLog(const std::string& path, int64_t every) : path_(path), every_(every) {
  VOLT_CHECK(every >= 1, "JsonLog", "expected every >= 1 step, got " << every);
  out_.open(path);
  VOLT_CHECK(out_.is_open(), "JsonLog", "cannot write " << path);
}

std::string JsonLog::format(std::string_view type, int64_t step, double time, const JsonFields& fields) {
  VOLT_CHECK(!type.empty(), "JsonLog", "expected a record type, got an empty one");
  nlohmann::ordered_json record;
  record["type"] = std::string(type);
  record["step"] = step;
  record["time"] = time;
  for (const auto& [name, value] : fields) {
    for (const char* r : kReserved)
      VOLT_CHECK(name != r, "JsonLog", "'" << name << "' is set by the log itself; give the field another name");
    VOLT_CHECK(!record.contains(name), "JsonLog", "the field '" << name << "' is given twice");
    record[name] = to_json(value);
  }
  return record.dump();
}

bool JsonLog::step(int64_t step, const JsonFields& fields, bool force) {
  if (!enabled() || !(force || step % every_ == 0)) return false;
  write("step", step, fields);
  return true;
}

void JsonLog::write(std::string_view type, int64_t step, const JsonFields& fields) {
  if (!enabled()) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  out_ << format(type, step, now, fields) << '\n' << std::flush;
  VOLT_CHECK(out_.good(), "JsonLog", "writing " << path_ << " failed");
}

}  // namespace volt::utils
