// ImageDataset: MNIST kept as u8 pixels, each batch converted to f32 and
// transformed when it is gathered.  The reference is the eager formula over
// the whole set: images_to_float, then the transform on all N rows at once.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <volt/data/dataloader.h>
#include <volt/data/datasets.h>
#include <volt/data/idx.h>
#include <volt/data/transforms.h>

#include "data/idx_files.h"

using namespace volt;
using test::contains;
using test::error_of;

namespace {

constexpr uint32_t kTrain = 300, kTest = 70;

// n images whose pixels run through every value 0..255 in a scrambled order.
std::vector<uint8_t> scrambled_pixels(uint32_t n, uint32_t salt) {
  std::vector<uint8_t> v(static_cast<size_t>(n) * 784);
  uint32_t s = 12345 + salt;
  for (auto& p : v) {
    s = s * 1103515245u + 12345u;
    p = static_cast<uint8_t>(s >> 16);
  }
  for (int k = 0; k < 256; ++k) v[static_cast<size_t>(k)] = static_cast<uint8_t>(k);
  return v;
}

void write_mnist(const test::TempDir& dir) {
  for (auto [prefix, n] : {std::pair<std::string, uint32_t>{"train", kTrain}, {"t10k", kTest}}) {
    std::vector<uint8_t> labels(n);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i * 7 % 10);
    test::write_raw(dir / (prefix + "-images-idx3-ubyte"), test::idx_bytes({n, 28, 28}, scrambled_pixels(n, n)));
    test::write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), test::idx_bytes({n}, labels));
  }
}

// The eager formula: every image as f32 / 255, then (x - mean) / std over the whole (N, 784).
std::vector<float> eager_reference(const test::TempDir& dir, const std::string& prefix, double mean, double stddev) {
  const Tensor x = data::images_to_float(data::read_idx(dir / (prefix + "-images-idx3-ubyte"), 3));
  return data::normalize(mean, stddev)(x).contiguous().to_vector<float>();
}

// Every batch of the loader, checked row by row against the reference, bit for bit.
int64_t check_batches(data::DataLoader& loader, const std::vector<float>& want, const Shape& sample_shape,
                      const std::vector<int64_t>& order) {
  int64_t row = 0, mismatches = 0;
  for (auto& batch : loader) {
    Shape shape{batch.target.size(0)};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    CHECK(batch.data.sizes() == shape);
    CHECK(batch.data.dtype() == DType::f32);
    const auto got = batch.data.to_vector<float>();
    for (int64_t b = 0; b < batch.target.size(0); ++b, ++row) {
      const float* ref = want.data() + order[static_cast<size_t>(row)] * 784;
      if (std::memcmp(got.data() + b * 784, ref, 784 * sizeof(float)) != 0) ++mismatches;
      CHECK(batch.target[b].item<int64_t>() == order[static_cast<size_t>(row)] * 7 % 10);
    }
  }
  CHECK(mismatches == 0);
  return row;
}

}  // namespace

TEST_CASE("ImageDataset: MNIST batches equal the eager whole-set formula bit for bit") {
  test::TempDir dir;
  write_mnist(dir);
  const std::vector<float> normalized = eager_reference(dir, "train", 0.1307, 0.3081);

  // data::MNIST with normalize(), through a shuffling loader with a short last batch.
  data::MNIST train(dir.path.string(), true, data::normalize(0.1307, 0.3081));
  CHECK(train.pixels().dtype() == DType::u8);
  CHECK(train.pixels().sizes() == Shape{kTrain, 784});
  const std::vector<int64_t> order = data::RandomSampler(kTrain, 3).next_epoch();
  data::DataLoader loader(train, 64, data::RandomSampler(kTrain, 3));
  CHECK(check_batches(loader, normalized, {784}, order) == kTrain);

  // data(): the whole set on request (a copy), the same values.
  const auto all = train.data().to_vector<float>();
  CHECK(std::memcmp(all.data(), normalized.data(), all.size() * sizeof(float)) == 0);
  auto [image, label] = train.get(5);
  CHECK(image.sizes() == Shape{784});
  CHECK(std::memcmp(image.to_vector<float>().data(), normalized.data() + 5 * 784, 784 * sizeof(float)) == 0);
  CHECK(label.item<int64_t>() == 5 * 7 % 10);

  // No transform: p / 255 exactly, every value 0..255 present.
  const std::vector<float> plain = eager_reference(dir, "t10k", 0.0, 1.0);
  data::MNIST test_set(dir.path.string(), false);
  std::vector<int64_t> seq(kTest);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int64_t>(i);
  data::DataLoader test_loader(test_set, 32);
  CHECK(check_batches(test_loader, plain, {784}, seq) == kTest);
  for (int k = 0; k < 256; ++k) CHECK(plain[static_cast<size_t>(k)] == static_cast<float>(k) / 255.0f);
}

TEST_CASE("ImageDataset: the LibTorch chain normalises per batch and shares the pixels") {
  test::TempDir dir;
  write_mnist(dir);
  const std::vector<float> want = eager_reference(dir, "train", 0.1307, 0.3081);
  auto raw = data::datasets::MNIST(dir.path.string());
  auto train = raw.map(data::transforms::Normalize<>(0.1307, 0.3081)).map(data::transforms::Stack<>());
  // map() copies no data: both hold the one u8 buffer, 1 byte per pixel.
  CHECK(train.dataset().pixels().raw_data() == raw.dataset().pixels().raw_data());
  CHECK(train.dataset().pixels().numel() * dtype_size(train.dataset().pixels().dtype()) == int64_t{kTrain} * 784);
  CHECK(raw.dataset().transforms().empty());
  CHECK(train.dataset().transforms().size() == 1);
  const std::vector<int64_t> order = data::RandomSampler(kTrain, 9).next_epoch();
  auto loader = data::make_data_loader<data::samplers::RandomSampler>(
      std::move(train), data::DataLoaderOptions().batch_size(50).seed(9));
  CHECK(check_batches(*loader, want, {1, 28, 28}, order) == kTrain);
}

TEST_CASE("ImageDataset: bad pixels, shapes and transforms are errors") {
  const Tensor targets = Tensor::from_vector<int64_t>({1, 2});
  CHECK(contains(error_of([&] { data::ImageDataset(Tensor::zeros({2, 4}), targets); }),
                 "ImageDataset: pixels must be u8"));
  CHECK(contains(error_of([&] { data::ImageDataset(Tensor::zeros({3, 4}).to(DType::u8), targets); }),
                 "ImageDataset: pixels and targets need the same first dim"));
  const data::ImageDataset d(Tensor::zeros({2, 4}).to(DType::u8), targets);
  CHECK(d.sample_shape() == Shape{4});
  CHECK(d.with_sample_shape({2, 2}).sample_shape() == Shape{2, 2});
  CHECK(contains(error_of([&] { (void)data::with_sample_shape(d, {3}); }), "with_sample_shape"));
  CHECK(contains(error_of([&] { (void)d.with_transform([](Tensor x) { return x.reshape({-1}); }); }),
                 "a transform must return a floating tensor shaped like its batch [1, 4]"));
  CHECK(contains(error_of([&] { (void)d.get(2); }), "index 2 is out of range for a dataset of 2 samples"));
  Tensor x = Tensor::empty({1, 4}, DType::f32), y = Tensor::empty({1}, DType::i64);
  const int64_t bad = 7;
  CHECK(contains(error_of([&] { d.gather(std::span<const int64_t>(&bad, 1), x, y); }), "index 7 is out of range"));
  Tensor wrong = Tensor::empty({1, 5}, DType::f32);
  const int64_t ok = 0;
  CHECK(contains(error_of([&] { d.gather(std::span<const int64_t>(&ok, 1), wrong, y); }),
                 "data batch must be a contiguous cpu f32 tensor of shape [1, 4]"));
}
