// What the cuBLASLt tests (test_cublaslt*.cpp) share: the headers of the
// jit, compile_step, the MLP and its optimiser, the CUDA backend's counters,
// and count_of for the lines of a printed trace.
#pragma once
#include <cstddef>
#include <string>

#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "cuda/skip_without_gpu.h"
#include "tensor/reference.h"

namespace volt::testing {

// How many times `what` occurs in `text` (overlaps counted).
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace volt::testing
