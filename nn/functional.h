// volt::nn::functional — the stateless forms of the layers, as torch.nn.functional.
//
//   namespace F = volt::nn::functional;
//   volt::Tensor h = F::relu(F::linear(x, w, b));    // x: (B, in), w: (out, in) -> (B, out)
//   volt::Tensor loss = F::cross_entropy(h, target);  // h: (B, C), target: (B) i64 -> ()
#pragma once
#include <cstdint>
#include <optional>

#include <volt/tensor/attention.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/ops.h>

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
// dropout(relu(linear(x, weight, bias)), p, training) as one op: in eager mode on
// the CPU the bias, the ReLU and the dropout mask are applied in the GEMM's store
// (the same draws as `dropout`, so the same bits for the same generator state);
// anywhere else it runs that chain.  x: (*, in), weight: (out, in) -> (*, out)
Tensor linear_relu_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), double p = 0.5,
                           bool training = true);
// q: (B, H, L, E), k: (B, H, S, E), v: (B, H, S, Ev) -> (B, H, L, Ev):
// softmax(q k^T scale, masked if causal) with dropout_p, times v (tensor/attention.h).
inline Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const AttentionOptions& options = {}) {
  return volt::scaled_dot_product_attention(q, k, v, options);
}
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return volt::log_softmax(x, dim); }
// LibTorch's builder for cross_entropy's options:
//   F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().ignore_index(0).label_smoothing(0.1))
// (reduction: Reduction::None, Mean or Sum).
class CrossEntropyFuncOptions {
 public:
  CrossEntropyFuncOptions& ignore_index(int64_t v) {
    o_.ignore_index = v;
    return *this;
  }
  CrossEntropyFuncOptions& label_smoothing(double v) {
    o_.label_smoothing = v;
    return *this;
  }
  CrossEntropyFuncOptions& reduction(Reduction r) {
    o_.reduction = r;
    return *this;
  }
  int64_t ignore_index() const { return o_.ignore_index; }
  double label_smoothing() const { return o_.label_smoothing; }
  Reduction reduction() const { return o_.reduction; }
  operator const CrossEntropyOptions&() const { return o_; }  // NOLINT: passed where the options are taken

 private:
  CrossEntropyOptions o_;
};

// logits: (N, C), target: (N) class indices -> () mean over N by default;
// options as PyTorch's (reduction, ignore_index, label_smoothing: tensor/cross_entropy.h)
inline Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {}) {
  return volt::cross_entropy(logits, target, options);
}

// LibTorch's F::EmbeddingFuncOptions().padding_idx(p): a negative p counts from the end.
class EmbeddingFuncOptions {
 public:
  EmbeddingFuncOptions& padding_idx(std::optional<int64_t> p) {
    padding_idx_ = p;
    return *this;
  }
  const std::optional<int64_t>& padding_idx() const { return padding_idx_; }

 private:
  std::optional<int64_t> padding_idx_;
};

// index: (*) integers, weight: (V, D) -> (*, D); LibTorch's argument order
// (input first).  The padding row's gradient is zero (volt::embedding).
inline Tensor embedding(const Tensor& index, const Tensor& weight, const EmbeddingFuncOptions& options = {}) {
  int64_t p = options.padding_idx().value_or(-1);
  if (options.padding_idx() && weight.defined() && weight.dim() == 2) {
    const int64_t n = weight.size(0);
    VOLT_CHECK(p >= -n && p < n, "embedding",
               "padding_idx must lie in [-" << n << ", " << n << ") for a table of " << n << " rows, got " << p);
    if (p < 0) p += n;
  }
  return volt::embedding(weight, index, p);
}
// logp: (N, C) log-probabilities, target: (N) class indices, weight: (C) or
// undefined -> () mean over the rows not ignored; LibTorch's argument order.
inline Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight = Tensor(),
                       Reduction reduction = Reduction::Mean, int64_t ignore_index = -100) {
  return volt::nll_loss(logp, target, weight, reduction, ignore_index);
}

// x: (N, C, H, W), weight: (O, C, kh, kw), bias: (O) or undefined -> (N, O, OH, OW)
inline Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                     std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                     std::array<int64_t, 2> dilation = {1, 1}) {
  return volt::conv2d(x, weight, bias, {stride, padding, dilation, 1});
}
// x: (N, C, H, W) -> (N, C, OH, OW); stride 0 (the default) means stride = kernel_size.
inline Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0) {
  return volt::max_pool2d(x, {kernel_size, kernel_size}, {stride, stride}, {padding, padding});
}
inline Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1) {
  return volt::flatten(x, start_dim, end_dim);
}

}  // namespace volt::nn::functional
