#include <volt/nn/sequential.h>

#include <string>
#include <typeinfo>

#include <volt/nn/activation.h>
#include <volt/nn/call_observer.h>
#include <volt/nn/functional.h>
#include <volt/nn/linear.h>

namespace volt::nn {

Functional::Functional(Fn fn) : Module("Functional"), fn_(std::move(fn)) {
  VOLT_CHECK(fn_ != nullptr, "Functional", "expected a function, got an empty one");
}

Tensor Functional::forward(const Tensor& x) { return fn_(x); }

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

namespace {

template <class M>
const M* exactly(const std::shared_ptr<Module>& m) {
  return m && typeid(*m) == typeid(M) ? static_cast<const M*>(m.get()) : nullptr;
}

}  // namespace

// In eager mode a Linear followed by a ReLU (and a Dropout) runs as one
// linear_relu_dropout: the same values and draws as the three layers, the
// bias, ReLU and mask applied in the GEMM's store.  Only layers of exactly
// these classes (a subclass may have its own forward); under a tracer each
// layer runs by itself, as written.
Tensor Sequential::forward(const Tensor& x) {
  const auto& layers = named_children();
  // Watched (call_observer.h), each layer is called as a module, unfused, so that it is seen.
  const bool watched = call_observer() != nullptr;
  const bool eager = current_mode() == nullptr && !watched;
  Tensor y = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Linear* lin = eager ? exactly<Linear>(layers[i].second) : nullptr;
    if (lin && i + 1 < layers.size() && exactly<ReLU>(layers[i + 1].second)) {
      const Dropout* drop = i + 2 < layers.size() ? exactly<Dropout>(layers[i + 2].second) : nullptr;
      y = functional::linear_relu_dropout(y, lin->weight(), lin->bias(), drop ? drop->p() : 0.0,
                                          drop && drop->is_training());
      i += drop ? 2 : 1;
      continue;
    }
    y = watched ? (*layers[i].second)(y) : layers[i].second->forward(y);
  }
  return y;
}

}  // namespace volt::nn
