// volt::nn::MLP — torchvision.ops.MLP's layout, so parameter names and the
// printed form match PyTorch's exactly.
//
//   auto net = std::make_shared<volt::nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10},
//                                              /*bias=*/true, /*dropout=*/0.1);
//   volt::Tensor logits = (*net)(x);  // x: (B, 784) -> (B, 10)
//   net->num_parameters();            // 1868590
//
// Every hidden width but the last gets Linear -> ReLU -> Dropout; the last gets
// Linear -> Dropout.  For the widths above the Linears are children 0, 3, 6, 9, 12.
#pragma once
#include <cstdint>
#include <vector>

#include <volt/nn/sequential.h>

namespace volt::nn {

class MLP : public Sequential {
 public:
  MLP(int64_t in_channels, const std::vector<int64_t>& hidden_channels, bool bias = true,
      double dropout = 0.0);
};

}  // namespace volt::nn
