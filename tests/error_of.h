// The message of the volt::Error a call throws ("" when it throws none), for
// tests that check what an error says.
#pragma once
#include <functional>
#include <string>

#include <volt/tensor/error.h>

namespace volt::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace volt::testing
