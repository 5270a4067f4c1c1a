// A layer's parameter as a public member, read with LibTorch's spelling and
// with volt's:
//
//   volt::nn::Embedding wte(256, 128);
//   volt::Tensor w = wte.weight;          // LibTorch: a data member
//   volt::Tensor same = wte.weight();     // volt: an accessor; the same tensor
//   volt::nn::functional::linear(x, wte.weight);  // a tied output projection
//
// Assigning rebinds the tensor the layer computes with, as it does in
// LibTorch; the parameter registered under that name stays the one it was
// (named_parameters() still lists it), exactly as LibTorch's member does.
#pragma once
#include <utility>

#include <volt/tensor/tensor.h>

namespace volt::nn {

class ParameterField : public Tensor {
 public:
  ParameterField() = default;
  ParameterField(Tensor t) : Tensor(std::move(t)) {}  // NOLINT: implicit, as the member it stands for
  ParameterField& operator=(Tensor t) {
    Tensor::operator=(std::move(t));
    return *this;
  }
  const Tensor& operator()() const { return *this; }
};

}  // namespace volt::nn
