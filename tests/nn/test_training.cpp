// End to end: a small MLP learns to separate two Gaussian blobs.
#include <doctest/doctest.h>

#include <cmath>

#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

// n points per class: class 0 around (-1.5, -1.5), class 1 around (1.5, 1.5).
// x: (2n, 2) f32, y: (2n) i64
std::pair<Tensor, Tensor> blobs(int64_t n) {
  auto noise = Tensor::randn({2 * n, 2}).to_vector<float>();
  std::vector<int64_t> labels(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) {
    labels[i] = i < n ? 0 : 1;
    const float centre = labels[i] ? 1.5f : -1.5f;
    noise[2 * i] += centre;
    noise[2 * i + 1] += centre;
  }
  return {Tensor::from_vector<float>(noise, {2 * n, 2}), Tensor::from_vector<int64_t>(labels)};
}

double accuracy(nn::Module& net, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  auto guess = net(x).argmax(1).to_vector<int64_t>();
  auto truth = y.to_vector<int64_t>();
  int64_t right = 0;
  for (size_t i = 0; i < truth.size(); ++i) right += guess[i] == truth[i];
  return double(right) / truth.size();
}

template <class Opt, class Options>
void train_blobs(Options options, int steps) {
  manual_seed(0);
  auto [x, y] = blobs(64);
  nn::MLP net(2, {16, 2});
  Opt opt(net.parameters(), options);
  nn::CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss = loss_fn(net(x), y);
    loss.backward();
    opt.step();
    last = loss.item<double>();
    if (step == 0) first = last;
    REQUIRE(std::isfinite(last));
  }
  MESSAGE("loss " << first << " -> " << last);
  CHECK(last < 0.25 * first);
  CHECK(last < 0.15);
  CHECK(accuracy(net, x, y) > 0.95);
}

}  // namespace

TEST_CASE("Adam drives the loss down on two blobs") {
  train_blobs<nn::Adam>(nn::AdamOptions{.lr = 0.02}, 150);
}

TEST_CASE("SGD with momentum drives the loss down on two blobs") {
  train_blobs<nn::SGD>(nn::SGDOptions{.lr = 0.1, .momentum = 0.9}, 150);
}

TEST_CASE("every parameter gets a gradient of its own shape") {
  manual_seed(0);
  nn::MLP net(4, {8, 3}, true, 0.2);
  Tensor x = Tensor::randn({5, 4});
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 0, 1});
  nn::CrossEntropyLoss()(net(x), y).backward();
  for (auto& [name, p] : net.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
  }
  net.zero_grad();
  for (auto& p : net.parameters()) CHECK(!p.grad().defined());
}
