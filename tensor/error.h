// volt::Error: every bad input is reported with one of these, naming the op and
// what it expected.  VOLT_CHECK(cond, "op", "message " << value) builds the text.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace volt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace volt

#define VOLT_CHECK(cond, op, msg)                       \
  do {                                                  \
    if (!(cond)) {                                      \
      std::ostringstream volt_check_os_;                \
      volt_check_os_ << op << ": " << msg;              \
      throw ::volt::Error(volt_check_os_.str());        \
    }                                                   \
  } while (0)

#define VOLT_FAIL(op, msg) VOLT_CHECK(false, op, msg)
