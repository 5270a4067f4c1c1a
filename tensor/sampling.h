// Choosing tokens: the k largest values along a dim, and draws from rows of
// probabilities, as torch.topk and torch.multinomial.
//
//   auto [top, at] = volt::topk(logits, 5);             // logits: (B, V) -> (B, 5) values, (B, 5) i64 indices
//   volt::Tensor next = volt::multinomial(probs, 1);    // probs: (B, V) -> (B, 1) i64 draws
//
// Both compute their choices on the host (a value is needed to choose), so
// under a trace they record a guard like item(); the values topk returns are
// gathered with tensor ops and carry a gradient to the chosen elements.
#pragma once
#include <cstdint>
#include <tuple>

#include <volt/tensor/tensor.h>

namespace volt {

// x: (..., n, ...) -> (values, indices), each with dim's size k; values in
// descending order (ascending when largest is false), ties to the lower index.
// NaN counts as larger than every number, as PyTorch orders it.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);

// probs: (n) or (rows, n) non-negative weights (each row's sum > 0, not
// necessarily 1) -> (num_samples) or (rows, num_samples) i64 category indices.
// Without replacement each category is drawn at most once (num_samples <= n,
// and at most the number of non-zero weights).  The uniforms come from the
// global Philox generator (manual_seed repeats the draws).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

}  // namespace volt
