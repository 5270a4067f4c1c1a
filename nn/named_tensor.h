// A name with its tensor, as named_parameters() and state_dict() list them.
//
//   for (auto& [name, p] : net->named_parameters()) ...          // structured binding
//   for (auto& item : net->named_parameters()) item.key(); item.value();  // LibTorch's spelling
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::nn {

struct NamedTensor : std::pair<std::string, Tensor> {
  using std::pair<std::string, Tensor>::pair;
  NamedTensor() = default;
  NamedTensor(const std::pair<std::string, Tensor>& p) : std::pair<std::string, Tensor>(p) {}
  const std::string& key() const { return first; }
  Tensor& value() { return second; }
  const Tensor& value() const { return second; }
};

using NamedTensors = std::vector<NamedTensor>;

}  // namespace volt::nn
