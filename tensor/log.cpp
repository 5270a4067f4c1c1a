#include <volt/tensor/log.h>

#include <cstdlib>

namespace volt {

bool log_enabled(std::string_view topic) {
  const char* e = std::getenv("VOLT_LOG");
  if (!e) return false;
  std::string_view list(e);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (item == topic || item == "all") return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace volt
