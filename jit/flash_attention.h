// flash: the executor that runs scaled_dot_product_attention (tensor/attention.h)
// as tiled kernels that never hold the (L, S) attention weights.
//
// It is one of the default executors, so a jitted GPT's trace reads
//
//   (t12, t13) = flash_attention(t9, t10, t11, causal=True, scale=0.25, dropout_p=0.0, rng_offset=0)
//
// in the forward (t13: each query row's log-sum-exp, saved for backward) and
// `flash_attention_backward(...)` in the backward, where the decomposition's
// matmul / masked_fill / softmax / dropout / matmul prims would otherwise be.
// compile_step and the lazy device record attention as one op and its
// gradient as scaled_dot_product_attention_backward, which flash runs as its
// forward again (for the log-sum-exp) and its backward (tensor/attention.h,
// attention_runs_whole).
// Under bf16/f16 autocast q, k and v arrive in the 16-bit type and flash takes
// them on the CPU: the tiles compute in f32, out is rounded once, lse is f32.
// Dropout draws the same Philox counters as the decomposition's: rng_offset is
// where the op's draws start among the program's (the tracer records it on the
// composite; the lazy device, relative to its graph's first draw), and the
// program's seed and offset are added when it runs.  The backward op carries
// its forward's rng_offset and draws that mask again.  In a step captured as a
// CUDA graph the kernels read the seed and offset from the graph's Philox word,
// so every replay draws a new mask.
//
// To compare with the decomposition, take it out of the defaults before
// making the jit (and put it back after):
//
//   volt::jit::remove_default_executor(volt::jit::flash_executor());
//   auto plain = volt::jit::jit(model);                 // attention runs as prims
//   volt::jit::add_default_executor(volt::jit::flash_executor());
#pragma once
#include <volt/jit/executor.h>

namespace volt::jit {

OperatorExecutor& flash_executor();

}  // namespace volt::jit
