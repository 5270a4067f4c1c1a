// volt::nn::Sequential — runs its children in order; they are named "0", "1", ...
//
//   auto seq = std::make_shared<volt::nn::Sequential>();
//   seq->push_back(std::make_shared<volt::nn::Linear>(4, 8));
//   seq->push_back(std::make_shared<volt::nn::ReLU>());
//   volt::Tensor y = (*seq)(x);  // x: (B, 4) -> (B, 8)
//   // parameter names: 0.weight, 0.bias
#pragma once
#include <memory>
#include <vector>

#include <volt/nn/module.h>

namespace volt::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);

  void push_back(std::shared_ptr<Module> layer);
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

  Tensor forward(const Tensor& x) override;

 protected:
  explicit Sequential(std::string type_name) : Module(std::move(type_name)) {}
};

}  // namespace volt::nn
