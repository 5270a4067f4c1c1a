// volt::nn::CrossEntropyLoss — mean over the batch of -log softmax(logits)[target].
//
//   volt::nn::CrossEntropyLoss loss_fn;
//   volt::Tensor loss = loss_fn(logits, targets);  // logits: (N, C), targets: (N) i64 -> ()
//   loss.backward();
#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

class CrossEntropyLoss : public Module {
 public:
  CrossEntropyLoss() : Module("CrossEntropyLoss") {}
  // logits: (N, C), target: (N) integer class indices -> () mean reduction
  Tensor forward(const Tensor& logits, const Tensor& target);
  Tensor operator()(const Tensor& logits, const Tensor& target) { return forward(logits, target); }
  // A loss takes two inputs: called with one, it says so.
  Tensor forward(const Tensor& x) override;
  using Module::operator();
};

}  // namespace volt::nn
