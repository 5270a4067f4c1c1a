// In-place initialisers for parameters, as torch.nn.init (and LibTorch's
// torch::nn::init): each fills its tensor without recording a gradient and
// returns it.
//
//   for (auto& p : net->named_parameters())
//     if (p.value().dim() == 2) volt::nn::init::normal_(p.value(), 0.0, 0.02);   // GPT-2's init
//   volt::nn::init::zeros_(fc->bias);
//
// The random ones draw from the global Philox generator (manual_seed repeats them).
#pragma once
#include <volt/tensor/tensor.h>

namespace volt::nn::init {

Tensor normal_(Tensor tensor, double mean = 0, double std = 1);    // N(mean, std^2)
Tensor uniform_(Tensor tensor, double low = 0, double high = 1);   // U(low, high)
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

}  // namespace volt::nn::init
