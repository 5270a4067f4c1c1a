// The Lazy Tensor tutorial's program, as written: pytorch/examples' MNIST CNN
// trained on the lazy device with Adadelta (lr 1.0) and StepLR (step 1,
// gamma 0.7), batch 64, nll_loss; each step is zero_grad -> forward -> loss ->
// backward -> step -> mark_step(), the loss printed every 10 batches in the
// tutorial's format.  After each epoch the test accuracy (the tutorial does
// not print it), at the end the lazy metrics' counter names.
//
//   lazy_mnist                        # 14 epochs, as the tutorial
//   lazy_mnist --epochs 1             # one epoch: about 98-99 % test accuracy
//   lazy_mnist --data-dir DIR         # MNIST files in DIR (default ~/.cache/volt/mnist)
//   lazy_mnist --mlp [options]        # the Thunder MLP with Adam instead (lazy_mnist --mlp --help)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/data/dataloader.h>
#include <volt/data/transforms.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/mnist_cnn.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using Clock = std::chrono::steady_clock;

int run_mlp_program(int argc, char** argv);  // mlp.cpp

namespace {

struct Options {
  int64_t epochs = 14;
  int64_t batch_size = 64;
  int64_t test_batch_size = 1000;
  int64_t log_interval = 10;
  int64_t max_batches = 0;  // per epoch; 0: all
  double lr = 1.0;
  double gamma = 0.7;
  uint64_t seed = 1;
  std::string data_dir;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"The Lazy Tensor tutorial's MNIST program (a CNN, Adadelta, StepLR) on volt's lazy device "
               "(lazy_mnist --mlp --help: the Thunder MLP program)",
               "lazy_mnist"};
  volt::utils::cli::setup(app);
  app.add_option("--epochs", o.epochs, "training epochs")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--data-dir", o.data_dir, "MNIST files (default $VOLT_DATA_DIR or ~/.cache/volt/mnist)");
  app.add_option("--batch-size", o.batch_size)->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--test-batch-size", o.test_batch_size)->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--lr", o.lr, "Adadelta's learning rate")->capture_default_str()->check(volt::utils::cli::positive());
  app.add_option("--gamma", o.gamma, "StepLR's factor per epoch")->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "print the loss every N batches")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--max-batches", o.max_batches, "stop each epoch after N batches (0: all)")
      ->capture_default_str()->check(volt::utils::cli::count(0));
  app.add_option("--seed", o.seed)->capture_default_str();
  volt::utils::cli::parse(app, argc, argv);
  return o;
}

void train(int64_t log_interval, nn::Module& model, data::DataLoader& train_loader, nn::Optimizer& optimizer,
           int64_t epoch, int64_t max_batches) {
  model.train();
  const int64_t n = train_loader.dataset().size(), batches = train_loader.size();
  int64_t batch_idx = 0;
  for (const data::Batch& b : train_loader) {
    if (max_batches > 0 && batch_idx == max_batches) break;
    Tensor data = b.data.to(kLazy), target = b.target.to(kLazy);
    optimizer.zero_grad();
    Tensor output = model(data);
    Tensor loss = nll_loss(output, target);
    loss.backward();
    optimizer.step();
    lazy::mark_step();
    if (batch_idx % log_interval == 0) {
      const double value = loss.item<double>();
      VOLT_CHECK(std::isfinite(value), "lazy_mnist", "the loss became " << value << " at batch " << batch_idx);
      std::printf("Train Epoch: %lld [%lld/%lld (%.0f%%)]\tLoss: %.6f\n", (long long)epoch,
                  (long long)(batch_idx * b.data.size(0)), (long long)n, 100.0 * batch_idx / batches, value);
      std::fflush(stdout);
    }
    ++batch_idx;
  }
}

// Average loss and accuracy over the test set, on the lazy device, in eval mode.
void test(nn::Module& model, data::DataLoader& test_loader) {
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0;
  for (const data::Batch& b : test_loader) {
    Tensor data = b.data.to(kLazy), target = b.target.to(kLazy);
    Tensor output = model(data);
    Tensor batch_loss = mul(nll_loss(output, target), static_cast<double>(b.data.size(0)));
    Tensor hits = sum(eq(argmax(output, 1), target));
    lazy::sync({batch_loss, hits});
    loss_sum += batch_loss.item<double>();
    correct += hits.item<int64_t>();
  }
  const int64_t n = test_loader.dataset().size();
  std::printf("\nTest set: Average loss: %.4f, Accuracy: %lld/%lld (%.2f%%)\n\n", loss_sum / n, (long long)correct,
              (long long)n, 100.0 * correct / n);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--mlp") == 0) {
      std::vector<char*> rest;
      for (int j = 0; j < argc; ++j)
        if (j != i) rest.push_back(argv[j]);
      return run_mlp_program(static_cast<int>(rest.size()), rest.data());
    }
  const Options o = parse(argc, argv);
  try {
    const std::string root = o.data_dir.empty() ? data::mnist_root() : o.data_dir;
    const data::Normalize transform({0.1307}, {0.3081});
    const data::ImageDataset dataset1 = data::with_sample_shape(data::MNIST(root, true, transform), {1, 28, 28});
    const data::ImageDataset dataset2 = data::with_sample_shape(data::MNIST(root, false, transform), {1, 28, 28});
    data::DataLoader train_loader(dataset1, o.batch_size);
    data::DataLoader test_loader(dataset2, o.test_batch_size);
    std::printf("data: MNIST from %s; lazy backend: %s\n", root.c_str(), lazy::backend().str().c_str());

    manual_seed(o.seed);
    auto model = std::make_shared<nn::MnistCNN>();
    model->to(kLazy);
    nn::Adadelta optimizer(model->parameters(), {.lr = o.lr});
    nn::StepLR scheduler(optimizer, 1, o.gamma);
    lazy::metrics::reset();
    for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
      const auto t0 = Clock::now();
      train(o.log_interval, *model, train_loader, optimizer, epoch, o.max_batches);
      lazy::wait_device_ops();
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      scheduler.step();
      std::printf("Epoch %lld: %.1f s training (%.1f samples/s)\n", (long long)epoch, seconds,
                  (o.max_batches > 0 ? std::min(o.max_batches * o.batch_size, dataset1.size()) : dataset1.size()) /
                      seconds);
      test(*model, test_loader);
    }
    std::printf("lazy metrics counters:");
    for (const std::string& name : lazy::metrics::counter_names()) std::printf(" %s", name.c_str());
    std::printf("\n");
  } catch (const Error& e) {
    std::cerr << "lazy_mnist: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
