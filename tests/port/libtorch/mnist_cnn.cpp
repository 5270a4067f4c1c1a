// A convolutional MNIST classifier trained with SGD and momentum, written in
// the style of the C++ frontend's examples.  The two copies of this program
// (tests/port/libtorch/ and tests/port/volt/) differ only by the renames in
// tests/port/renames.sed; tests/port/check_renames.sh checks that.
//
// Usage: mnist_cnn [DATA_ROOT [EPOCHS [BATCHES_PER_EPOCH]]]
#include <torch/torch.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

struct Net : torch::nn::Module {
  Net() {
    conv1 = register_module("conv1", torch::nn::Conv2d(1, 10, /*kernel_size=*/5));
    conv2 = register_module("conv2", torch::nn::Conv2d(10, 20, /*kernel_size=*/5));
    conv2_drop = register_module("conv2_drop", torch::nn::Dropout2d(0.5));
    fc1 = register_module("fc1", torch::nn::Linear(320, 50));
    fc2 = register_module("fc2", torch::nn::Linear(50, 10));
  }

  // x: (B, 1, 28, 28) -> (B, 10) log-probabilities
  torch::Tensor forward(const torch::Tensor& input) {
    torch::Tensor x = torch::relu(torch::max_pool2d(conv1->forward(input), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::Dropout2d conv2_drop{nullptr};
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
};

const int64_t kTrainBatchSize = 64;
const int64_t kTestBatchSize = 1000;
const int64_t kLogInterval = 10;

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader,
           torch::optim::Optimizer& optimizer, size_t dataset_size, int64_t max_batches) {
  model.train();
  int64_t batch_idx = 0;
  size_t seen = 0;
  for (auto& batch : data_loader) {
    if (max_batches > 0 && batch_idx == max_batches) break;
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    loss.backward();
    optimizer.step();
    seen += static_cast<size_t>(batch.data.size(0));
    if (batch_idx++ % kLogInterval == 0) {
      std::printf("Train Epoch: %zu [%5zu/%5zu] Loss: %.4f\n", epoch, seen, dataset_size,
                  loss.template item<float>());
    }
  }
}

template <typename DataLoader>
double test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int64_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum).template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  test_loss /= static_cast<double>(dataset_size);
  std::printf("Test set: Average loss: %.4f | Accuracy: %.3f\n", test_loss,
              static_cast<double>(correct) / static_cast<double>(dataset_size));
  return test_loss;
}

int main(int argc, char* argv[]) {
  const std::string data_root = argc > 1 ? argv[1] : "./data";
  const size_t epochs = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 10;
  const int64_t max_batches = argc > 3 ? std::atoll(argv[3]) : 0;  // 0: every batch
  torch::manual_seed(1);

  torch::DeviceType device_type = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  torch::Device device(device_type);
  std::cout << "Training on " << device << "\n";

  Net model;
  model.to(device);

  auto train_dataset = torch::data::datasets::MNIST(data_root)
                           .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_dataset), kTrainBatchSize);

  auto test_dataset = torch::data::datasets::MNIST(data_root, torch::data::datasets::MNIST::Mode::kTest)
                          .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                          .map(torch::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(test_dataset), kTestBatchSize);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  double first_loss = 0, last_loss = 0;
  for (size_t epoch = 1; epoch <= epochs; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_dataset_size, max_batches);
    last_loss = test(model, device, *test_loader, test_dataset_size);
    if (epoch == 1) first_loss = last_loss;
  }
  std::cout << "parameters: " << model.parameters().size() << ", first test loss " << first_loss << ", last "
            << last_loss << "\n";
  return 0;
}
