// volt::nn::functional — the stateless forms of the layers, as torch.nn.functional.
//
//   namespace F = volt::nn::functional;
//   volt::Tensor h = F::relu(F::linear(x, w, b));    // x: (B, in), w: (out, in) -> (B, out)
//   volt::Tensor loss = F::cross_entropy(h, target);  // h: (B, C), target: (B) i64 -> ()
#pragma once
#include "tensor/ops.h"

namespace volt::nn::functional {

// x: (*, in), weight: (out, in), bias: (out) or undefined -> (*, out)
inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor()) {
  return volt::linear(x, weight, bias);
}
inline Tensor relu(const Tensor& x) { return volt::relu(x); }
// Keeps each element with probability 1-p, scaled by 1/(1-p); identity when !training.
inline Tensor dropout(const Tensor& x, double p = 0.5, bool training = true) {
  return volt::dropout(x, p, training);
}
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return volt::log_softmax(x, dim); }
// logits: (N, C), target: (N) class indices -> () mean over N
inline Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  return volt::cross_entropy(logits, target);
}
// logp: (N, C) log-probabilities, target: (N) class indices -> () mean over N
inline Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  return volt::nll_loss(logp, target);
}

}  // namespace volt::nn::functional
