// VOLT_LOG: one switch, a list of topics (tensor/log.h).
#include <doctest/doctest.h>

#include <cstdlib>

#include <volt/tensor/log.h>

TEST_CASE("log: VOLT_LOG names topics, or all") {
  ::setenv("VOLT_LOG", "jit,lazy", 1);
  CHECK(volt::log_enabled("jit"));
  CHECK(volt::log_enabled("lazy"));
  CHECK_FALSE(volt::log_enabled("cuda"));
  CHECK_FALSE(volt::log_enabled("ji"));
  ::setenv("VOLT_LOG", "all", 1);
  CHECK(volt::log_enabled("cuda-source"));
  ::unsetenv("VOLT_LOG");
  CHECK_FALSE(volt::log_enabled("jit"));
}
