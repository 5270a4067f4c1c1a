// libFuzzer entry point; VOLT_FUZZ_TARGET names a function of targets.h.
// Built by tests/fuzz/run_fuzz.sh, not by CMake.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return volt::fuzz::VOLT_FUZZ_TARGET(data, size);
}
