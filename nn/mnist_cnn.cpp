#include <volt/nn/mnist_cnn.h>

#include <volt/tensor/ops.h>

namespace volt::nn {

MnistCNN::MnistCNN() : Module("Net") {
  // Registered (and so initialised) in the tutorial's order.
  conv1 = register_module("conv1", std::make_shared<Conv2d>(1, 32, 3, 1));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, 3, 1));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(0.25));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(0.5));
  fc1 = register_module("fc1", std::make_shared<Linear>(9216, 128));
  fc2 = register_module("fc2", std::make_shared<Linear>(128, 10));
}

Tensor MnistCNN::forward(const Tensor& x) {
  Tensor h = relu((*conv1)(x));
  h = relu((*conv2)(h));
  h = max_pool2d(h, {2, 2});
  h = (*dropout1)(h);
  h = flatten(h, 1);
  h = relu((*fc1)(h));
  h = (*dropout2)(h);
  return log_softmax((*fc2)(h), 1);
}

}  // namespace volt::nn
