// volt::nn::CrossEntropyLoss — -log softmax(logits)[target], reduced over the
// batch (mean by default), with PyTorch's options (tensor/cross_entropy.h).
//
//   volt::nn::CrossEntropyLoss loss_fn;            // or loss_fn({.ignore_index = -1, .label_smoothing = 0.1})
//   volt::Tensor loss = loss_fn(logits, targets);  // logits: (N, C), targets: (N) i64 -> ()
//   loss.backward();
#pragma once
#include <volt/nn/module.h>
#include <volt/tensor/cross_entropy.h>

namespace volt::nn {

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : Module("CrossEntropyLoss"), options_(options) {}
  // logits: (N, C), target: (N) integer class indices -> () ((N) for Reduction::None)
  Tensor forward(const Tensor& logits, const Tensor& target);
  Tensor operator()(const Tensor& logits, const Tensor& target) { return forward(logits, target); }
  // A loss takes two inputs: called with one, it says so.
  Tensor forward(const Tensor& x) override;
  using Module::operator();
  const CrossEntropyOptions& options() const { return options_; }

 private:
  CrossEntropyOptions options_;
};

}  // namespace volt::nn
