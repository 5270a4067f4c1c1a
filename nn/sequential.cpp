#include <volt/nn/sequential.h>

#include <string>

namespace volt::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) : Module("Sequential") {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<Module> layer) {
  add_child(std::to_string(size()), std::move(layer));
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  VOLT_CHECK(i < size(), "Sequential", "index " << i << " out of range for " << size() << " layers");
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, layer] : named_children()) y = layer->forward(y);
  return y;
}

}  // namespace volt::nn
