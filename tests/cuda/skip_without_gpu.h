// The CUDA tests run where a GPU (or tests/cudasim) answers; elsewhere each
// case returns at once, says why and is counted as skipped (tests/skip.h).
#pragma once
#include <volt/tensor/cuda/runtime.h>

#include "tests/skip.h"

#define SKIP_WITHOUT_GPU()                                                              \
  do {                                                                                  \
    if (!volt::cuda::is_available()) VOLT_SKIP("no CUDA GPU or driver on this machine"); \
  } while (0)
