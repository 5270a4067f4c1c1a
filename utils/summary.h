// A model's summary: per layer its name, output shape, parameters and their
// bytes, learned by running one input through the model (no gradients are
// recorded, and every layer is in eval mode for the call: no dropout draws).
//
//   auto net = std::make_shared<volt::nn::MLP>(784, std::vector<int64_t>{256, 10});
//   std::cout << volt::utils::summary(*net, volt::zeros({8, 784}));
//   // layer (type)          output shape   params   param bytes
//   // (MLP)                 [8, 10]        203,530  795.0 KiB
//   //   0 (Linear)          [8, 256]       200,960  785.0 KiB ...
//
// A layer that the call did not reach (or whose parent called its forward()
// directly) shows "--" as its output shape.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <volt/nn/module.h>
#include <volt/tensor/tensor.h>

namespace volt::utils {

struct LayerSummary {
  std::string name;  // dotted, as named_modules() names it ("" for the model)
  std::string type;  // "Linear"
  int depth = 0;     // 0 for the model, 1 for its children, ...
  bool called = false;
  std::vector<int64_t> output_shape;  // of the first call
  int64_t output_bytes = 0;
  int64_t params = 0;  // its own and its children's, each tensor once
  int64_t trainable_params = 0;
  int64_t param_bytes = 0;
};

struct ModelSummary {
  std::vector<LayerSummary> layers;  // depth first, in registration order
  std::vector<int64_t> input_shape;
  std::string table() const;  // what operator<< prints
};

ModelSummary summary(nn::Module& model, const Tensor& input);
std::ostream& operator<<(std::ostream& os, const ModelSummary& s);

// "1,234,567"; "795.0 KiB" (powers of 1024, "512 B" below one KiB).
std::string grouped(int64_t n);
std::string human_bytes(int64_t bytes);

}  // namespace volt::utils
