// A test case that cannot run here (no GPU, no Chromium, no torch in Python)
// says so and returns: VOLT_SKIP("no CUDA GPU or driver on this machine").
// doctest would count such a case as passed; each one is counted here
// instead, and the test programs print the count and the reasons at the end
// (print_skips), so a run that checked nothing on the GPU says so.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <string>

namespace volt::testing {

inline std::map<std::string, int>& skips() {
  static std::map<std::string, int> reasons;
  return reasons;
}

inline void print_skips() {
  int n = 0;
  for (const auto& [why, count] : skips()) n += count;
  if (n == 0) return;
  std::printf("volt: %d test case%s skipped at run time (not counted as checks):\n", n, n == 1 ? "" : "s");
  for (const auto& [why, count] : skips()) std::printf("  %4d  %s\n", count, why.c_str());
}

}  // namespace volt::testing

#define VOLT_SKIP(why)                                      \
  do {                                                      \
    const std::string volt_skip_why_ = (why);               \
    ++::volt::testing::skips()[volt_skip_why_];             \
    MESSAGE("skipped: " << volt_skip_why_);                 \
    return;                                                 \
  } while (0)
