// The Lazy Tensor tutorial's MNIST model (pytorch/examples' mnist "Net"), with
// PyTorch's parameter names and printed form.
//
//   volt::manual_seed(1);
//   auto net = std::make_shared<volt::nn::MnistCNN>();
//   volt::Tensor logp = (*net)(x);   // x: (B, 1, 28, 28) -> (B, 10) log-probabilities
//   net->num_parameters();           // 1199882
//
// conv1 -> relu -> conv2 -> relu -> max_pool2d(2) -> dropout1 -> flatten(1)
//   -> fc1 -> relu -> dropout2 -> fc2 -> log_softmax(dim=1)
#pragma once
#include <memory>

#include <volt/nn/activation.h>
#include <volt/nn/conv.h>
#include <volt/nn/linear.h>

namespace volt::nn {

class MnistCNN : public Module {
 public:
  MnistCNN();
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  std::shared_ptr<Linear> fc1, fc2;
};

}  // namespace volt::nn
