// An operator executor for cross_entropy, written the way a volt user would:
// outside volt's sources, with its public headers only.  It claims
// volt::cross_entropy and runs it as two fused operators of its own:
//
//   (loss, max_log_sum_exp) = fused_cross_entropy(logits, target, reduction, ignore_index, label_smoothing)
//       one pass over the logits: each row's log-sum-exp (kept for backward) and its loss
//   grad = fused_cross_entropy_backward(g, logits, target=, max_log_sum_exp=, reduction=, ignore_index=,
//                                       label_smoothing=)
//       one pass: softmax from the saved log-sum-exp, minus the (smoothed) one-hot, times g
//
// volt's own path recomputes each row's max and sum of exponentials in the
// backward; this one saves them (4 bytes a row) and reads the logits once
// each way.  The checker takes f32, 2-D logits and integer 1-D targets on the
// CPU (and on CUDA in a CUDA build); every reduction, ignore_index and label
// smoothing in [0, 1] are supported.
//
//   FusedCrossEntropy fused;
//   auto cfoo = volt::jit::jit(foo, {.executors = {fused.executor}});
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

namespace fused_ce {

struct FusedCrossEntropy {
  volt::jit::OperatorExecutor executor{"fused_ce", "0.1"};
  volt::jit::Symbol forward;   // (logits, target, reduction, ignore_index, label_smoothing) -> (loss, mlse)
  volt::jit::Symbol backward;  // (g, logits, target, mlse, reduction, ignore_index, label_smoothing) -> grad

  FusedCrossEntropy();
};

// The implementations, callable on real tensors (the symbols run them).
std::vector<volt::Tensor> forward_impl(const std::vector<volt::Value>& args);
std::vector<volt::Tensor> backward_impl(const std::vector<volt::Value>& args);

}  // namespace fused_ce
