// The test program's main: doctest's, then the count of cases that were
// skipped at run time (tests/skip.h), which doctest's summary counts as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/skip.h"

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (!ctx.shouldExit()) volt::testing::print_skips();
  return rc;
}
