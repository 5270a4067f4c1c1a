// The CUDA tests run where a GPU (or tests/cudasim) answers; elsewhere each
// case returns at once and says why.
#pragma once
#include <doctest/doctest.h>

#include <volt/tensor/cuda/runtime.h>

#define SKIP_WITHOUT_GPU()                                         \
  do {                                                             \
    if (!volt::cuda::is_available()) {                             \
      MESSAGE("skipped: no CUDA GPU or driver on this machine");   \
      return;                                                      \
    }                                                              \
  } while (0)
