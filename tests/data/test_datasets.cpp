// LibTorch's dataset chain: datasets::MNIST(root, Mode).map(Normalize<>).map(Stack<>),
// make_data_loader taking the dataset by move and a plain batch size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <volt/data/datasets.h>

#include "data/idx_files.h"
#include "error_of.h"

using namespace volt;

namespace {
// n images of 28 x 28 pixels, pixel k of image i = (7 i + k) % 256; label i % 10.
void write_mnist(const test::TempDir& dir, const std::string& prefix, uint32_t n) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 784), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t k = 0; k < 784; ++k) pixels[i * 784 + k] = static_cast<uint8_t>((7 * i + k) % 256);
  }
  test::write_raw(dir / (prefix + "-images-idx3-ubyte"), test::idx_bytes({n, 28, 28}, pixels));
  test::write_raw(dir / (prefix + "-labels-idx1-ubyte"), test::idx_bytes({n}, labels));
}
}  // namespace

TEST_CASE("datasets::MNIST(...).map(Normalize<>).map(Stack<>) in a loader that owns it") {
  test::TempDir dir;
  write_mnist(dir, "train", 10);
  write_mnist(dir, "t10k", 6);
  auto train = data::datasets::MNIST(dir.path.string())
                   .map(data::transforms::Normalize<>(0.1307, 0.3081))
                   .map(data::transforms::Stack<>());
  CHECK(train.size().value() == 10);
  auto test_set = data::datasets::MNIST(dir.path.string(), data::datasets::MNIST::Mode::kTest);
  CHECK(test_set.size().value() == 6);
  CHECK_FALSE(test_set.is_train());
  auto loader = data::make_data_loader<data::samplers::SequentialSampler>(std::move(train), 4);
  std::vector<int64_t> labels;
  int64_t batches = 0;
  for (auto& batch : *loader) {
    ++batches;
    CHECK(batch.data.sizes() == Shape{batch.target.size(0), 1, 28, 28});
    for (int64_t b = 0; b < batch.target.size(0); ++b) {
      const int64_t i = static_cast<int64_t>(labels.size());
      labels.push_back(batch.target[b].item<int64_t>());
      // The reference: (pixel / 255 - mean) / std, pixel k of image i as written.
      const auto img = batch.data[b].contiguous().to_vector<float>();
      for (int64_t k : {0, 1, 400, 783}) {
        const double want = (((7 * i + k) % 256) / 255.0 - 0.1307) / 0.3081;
        CHECK(img[static_cast<size_t>(k)] == doctest::Approx(want).epsilon(1e-5));
      }
    }
  }
  CHECK(batches == 3);
  CHECK(labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Random order over every sample, with options as LibTorch spells them.
  auto shuffled = data::make_data_loader<data::samplers::RandomSampler>(
      data::datasets::MNIST(dir.path.string(), data::datasets::MNIST::Mode::kTest),
      data::DataLoaderOptions().batch_size(6));
  std::vector<int64_t> seen;
  for (auto& batch : *shuffled) seen = batch.target.to_vector<int64_t>();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(testing::error_of([&] { data::datasets::MNIST((dir.path / "nowhere").string()); }) != "");
}
