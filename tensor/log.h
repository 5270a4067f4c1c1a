// VOLT_LOG: one switch for volt's diagnostic lines on stderr, a comma-separated
// list of topics (or "all"):
//
//   VOLT_LOG=jit ./build/examples/mnist_mlp   # why the jit compiled again
//
//   jit          the jit and the compiled step: each compile after the first and why
//   graph        a compiled CUDA step that is not captured as a CUDA graph, and why
//   lazy         the lazy device: each graph compile and why it missed the cache
//   cuda         each NVRTC compile and its time; cuda-source adds the numbered source
//   gemm         the CPU's bf16 GEMM: which path runs (amx, dpbf16 or the f32 fallback), once
#pragma once
#include <string_view>

namespace volt {

// Whether VOLT_LOG names `topic` (or "all").  Read at each call: logs are for
// rare events (compiles), and a test may set the variable while running.
bool log_enabled(std::string_view topic);

}  // namespace volt
