// What volt sees of the GPUs, said in one line, and the guard of a run on a
// GPU node: there (VOLT_EXPECT_REAL_GPU=1, set by tests/gpu/check.sh) a
// missing device or a simulator left preloaded fails loudly instead of
// turning every CUDA case into a skip.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cstdlib>
#include <string>

#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/device.h>

TEST_CASE("cuda: the devices are described, and real where a real GPU is expected") {
  const std::string d = volt::cuda::describe_devices();
  MESSAGE(d);
  const int n = volt::cuda::device_count();
  if (n == 0) {
    CHECK((d.find("no CUDA device") != std::string::npos || d.find("0 CUDA devices") != std::string::npos));
  } else {
    CHECK(d.find(std::to_string(n) + " CUDA device") != std::string::npos);
    CHECK(d.find("cuda:0 ") != std::string::npos);
  }
  CHECK((d.find("simulated") != std::string::npos) == volt::cuda::is_simulated());
  const char* expect = std::getenv("VOLT_EXPECT_REAL_GPU");
  if (expect && std::string(expect) == "1") {
    REQUIRE_MESSAGE(n > 0, "a real GPU was expected: " << d);
    REQUIRE_MESSAGE(!volt::cuda::is_simulated(), "a real GPU was expected, but the simulator is loaded: " << d);
    REQUIRE(volt::cuda::compute_capability(0) >= 50);
  }
}
#endif
