// Samplers, TensorDataset, MNIST on a tiny fake dataset, and the DataLoader.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include <volt/data/dataloader.h>
#include "idx_files.h"
#include <volt/tensor/ops.h>

using namespace volt;
using namespace volt::test;

namespace {

// data (n, 3) with row i = {i, i + 0.5, -i}; targets (n) with target i = 100 + i.
data::TensorDataset rows_dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {float(i), float(i) + 0.5f, -float(i)});
    y.push_back(100 + i);
  }
  return data::TensorDataset(Tensor::from_vector(x, {n, 3}), Tensor::from_vector(y));
}

// The sample indices of one epoch, in order, checking each batch's rows match its targets.
std::vector<int64_t> visit(data::DataLoader& loader) {
  std::vector<int64_t> seen;
  for (auto& [x, y] : loader) {
    auto xs = x.to_vector<float>();
    auto ys = y.to_vector<int64_t>();
    for (size_t r = 0; r < ys.size(); ++r) {
      const int64_t i = ys[r] - 100;
      CHECK(xs[3 * r] == float(i));
      CHECK(xs[3 * r + 2] == -float(i));
      seen.push_back(i);
    }
  }
  return seen;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("SequentialSampler and RandomSampler orders") {
  data::SequentialSampler seq(5);
  CHECK(seq.next_epoch() == iota(5));
  CHECK(seq.next_epoch() == iota(5));

  data::RandomSampler a(1000, 42), b(1000, 42), c(1000, 43);
  auto a0 = a.next_epoch(), a1 = a.next_epoch();
  auto sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(1000));  // a permutation
  CHECK(a0 != iota(1000));
  CHECK(a0 != a1);              // each epoch differs
  CHECK(b.next_epoch() == a0);  // the same seed gives the same orders
  CHECK(b.next_epoch() == a1);
  CHECK(c.next_epoch() != a0);
  CHECK(a.epoch() == 2);
  a.set_epoch(1);
  CHECK(a.next_epoch() == a1);
  CHECK(data::RandomSampler(0, 1).next_epoch().empty());
  CHECK(data::RandomSampler(1, 1).next_epoch() == std::vector<int64_t>{0});
}

TEST_CASE("TensorDataset holds rows and gathers them") {
  auto ds = rows_dataset(6);
  CHECK(ds.size() == 6);
  CHECK(ds.sample_shape() == Shape{3});
  CHECK(ds.target_shape() == Shape{});
  CHECK(ds.data_dtype() == DType::f32);
  CHECK(ds.target_dtype() == DType::i64);
  auto [x, y] = ds.get(4);
  CHECK(x.to_vector<float>() == std::vector<float>{4, 4.5, -4});
  CHECK(y.dim() == 0);
  CHECK(y.item<int64_t>() == 104);
  CHECK(contains(error_of([&] { ds.get(6); }), "index 6 is out of range for a dataset of 6"));

  Tensor xb = Tensor::empty({2, 3}), yb = Tensor::empty({2}, DType::i64);
  const int64_t idx[] = {5, 1};
  ds.gather(idx, xb, yb);
  CHECK(xb.to_vector<float>() == std::vector<float>{5, 5.5, -5, 1, 1.5, -1});
  CHECK(yb.to_vector<int64_t>() == std::vector<int64_t>{105, 101});
  Tensor wrong = Tensor::empty({2, 4});
  CHECK(contains(error_of([&] { ds.gather(idx, wrong, yb); }), "data batch must be"));

  auto msg = error_of([] { data::TensorDataset(Tensor::zeros({4, 2}), Tensor::zeros({3})); });
  CHECK(contains(msg, "same first dim"));
}

TEST_CASE("DataLoader: sequential batches, the short last batch and drop_last") {
  auto ds = rows_dataset(10);
  data::DataLoader loader(ds, 4);
  CHECK(loader.size() == 3);
  std::vector<Shape> shapes;
  for (const data::Batch& b : loader) {
    shapes.push_back(b.data.sizes());
    CHECK(b.data.dtype() == DType::f32);
    CHECK(b.target.dtype() == DType::i64);
    CHECK(b.target.sizes() == Shape{b.data.size(0)});
  }
  CHECK(shapes == std::vector<Shape>{{4, 3}, {4, 3}, {2, 3}});
  CHECK(visit(loader) == iota(10));

  data::DataLoader dropping(ds, 4, nullptr, /*drop_last=*/true);
  CHECK(dropping.size() == 2);
  CHECK(visit(dropping) == iota(8));

  data::DataLoader exact(ds, 5, nullptr, true);  // nothing to drop
  CHECK(visit(exact) == iota(10));
  data::DataLoader too_big(ds, 11, nullptr, true);
  CHECK(too_big.size() == 0);
  CHECK(too_big.begin() == too_big.end());
}

TEST_CASE("DataLoader with RandomSampler: every index once per epoch, epochs differ") {
  auto ds = rows_dataset(103);
  data::DataLoader loader(ds, 8, data::RandomSampler(ds.size(), 7));
  CHECK(loader.size() == 13);
  auto e0 = visit(loader), e1 = visit(loader);
  for (const auto& e : {e0, e1}) {
    CHECK(std::set<int64_t>(e.begin(), e.end()).size() == 103);
    CHECK(e.size() == 103);
  }
  CHECK(e0 != e1);
  CHECK(e0 != iota(103));

  data::DataLoader again(ds, 8, data::RandomSampler(ds.size(), 7));
  CHECK(visit(again) == e0);
  CHECK(visit(again) == e1);

  data::DataLoader dropping(ds, 8, data::RandomSampler(ds.size(), 7), true);
  auto d0 = visit(dropping);
  CHECK(d0.size() == 96);
  CHECK(std::equal(d0.begin(), d0.end(), e0.begin()));  // the same order, minus the tail
}

TEST_CASE("DataLoader: batches outlive the loop, non-scalar targets, bad arguments") {
  // Regression targets (n, 2) f64 and u8 data (n, 2, 2): the loader is generic.
  Tensor x = Tensor::from_vector<uint8_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 2, 2});
  Tensor y = Tensor::from_vector<double>({0.5, 1, 1.5, 2, 2.5, 3}, {3, 2});
  data::TensorDataset ds(x, y);
  data::DataLoader loader(ds, 2);
  std::vector<data::Batch> kept;
  for (const auto& b : loader) kept.push_back(b);
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].data.sizes() == Shape{2, 2, 2});
  CHECK(kept[0].data.dtype() == DType::u8);
  CHECK(kept[0].target.sizes() == Shape{2, 2});
  CHECK(kept[0].target.to_vector<double>() == std::vector<double>{0.5, 1, 1.5, 2});
  CHECK(kept[1].data.to_vector<uint8_t>() == std::vector<uint8_t>{8, 9, 10, 11});

  CHECK(contains(error_of([&] { data::DataLoader(ds, 0); }), "batch_size must be positive"));
  CHECK(contains(error_of([&] { data::DataLoader(ds, 2, data::RandomSampler(5, 0)); }),
                 "the sampler draws from 5 indices but the dataset has 3 samples"));
}

// ---- MNIST on a fake dataset: 5 training and 2 test images of 28x28.

namespace {

std::vector<uint8_t> fake_pixels(int n) {
  std::vector<uint8_t> v(n * 784);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 37 % 256);
  v[0] = 0;
  v[1] = 255;
  return v;
}

void write_fake_mnist(const TempDir& dir) {
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({5, 28, 28}, fake_pixels(5)));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({5}, {5, 0, 4, 1, 9}));
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({2, 28, 28}, fake_pixels(2)));
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({2}, {7, 2}));
}

}  // namespace

TEST_CASE("MNIST reads raw and .gz files into f32 [0, 1] images and i64 labels") {
  TempDir dir;
  write_fake_mnist(dir);
  data::MNIST train(dir.path.string(), true);
  CHECK(train.train());
  CHECK(train.size() == 5);
  CHECK(train.sample_shape() == Shape{784});
  CHECK(train.data().sizes() == Shape{5, 784});
  CHECK(train.data().dtype() == DType::f32);
  CHECK(train.targets().dtype() == DType::i64);
  CHECK(train.targets().to_vector<int64_t>() == std::vector<int64_t>{5, 0, 4, 1, 9});
  auto pixels = fake_pixels(5);
  auto x = train.data().to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == float(pixels[i]) / 255.0f);
  CHECK(*std::min_element(x.begin(), x.end()) == 0.0f);
  CHECK(*std::max_element(x.begin(), x.end()) == 1.0f);

  auto [image, label] = train.get(4);
  CHECK(image.sizes() == Shape{784});
  CHECK(label.item<int64_t>() == 9);

  data::MNIST test(dir.path.string(), false);
  CHECK(test.size() == 2);
  CHECK(test.targets().to_vector<int64_t>() == std::vector<int64_t>{7, 2});

  data::DataLoader loader(train, 2, data::RandomSampler(train.size(), 0));
  int64_t rows = 0;
  for (auto& [xb, yb] : loader) {
    CHECK(xb.sizes() == Shape{yb.size(0), 784});
    rows += yb.size(0);
  }
  CHECK(rows == 5);
}

TEST_CASE("MNIST applies the transform to each gathered batch") {
  TempDir dir;
  write_fake_mnist(dir);
  std::vector<int64_t> rows_seen;
  data::MNIST scaled(dir.path.string(), true, [&](Tensor x) {
    rows_seen.push_back(x.size(0));
    CHECK(x.size(1) == 784);
    return x * 2.0;
  });
  CHECK(rows_seen == std::vector<int64_t>{1});  // one sample, checked at construction
  data::DataLoader batches(scaled, 2);
  const auto pixels = fake_pixels(5);
  size_t start = 0;  // the first sample of each batch, in order
  for (auto& b : batches) {
    CHECK(b.data.to_vector<float>()[1] == float(pixels[start * 784 + 1]) / 255.0f * 2.0f);
    start += static_cast<size_t>(b.target.size(0));
  }
  CHECK(rows_seen == std::vector<int64_t>{1, 2, 2, 1});  // then once per batch, never the whole set
  CHECK(scaled.data().to_vector<float>()[1] == 2.0f);    // data(): every sample, transformed

  data::MNIST normalized(dir.path.string(), true, data::normalize(0.5, 0.25));
  auto v = normalized.data().to_vector<float>();
  CHECK(v[0] == doctest::Approx(-2.0));  // (0 - 0.5) / 0.25
  CHECK(v[1] == doctest::Approx(2.0));   // (1 - 0.5) / 0.25

  auto msg =
      error_of([&] { data::MNIST(dir.path.string(), true, [](Tensor x) { return x.sum(); }); });
  CHECK(contains(msg, "a transform must return a floating tensor shaped like its batch [1, 784]"));
}

TEST_CASE("MNIST: missing files, mismatched counts and impossible labels are errors") {
  TempDir dir;
  auto msg = error_of([&] { data::MNIST(dir.path.string(), true); });
  CHECK(contains(msg, "neither " + dir / "train-images-idx3-ubyte"));
  CHECK(contains(msg, "`data/fetch_mnist.sh " + dir.path.string() + "`"));  // the command that fetches it there

  write_fake_mnist(dir);
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({3}, {7, 2, 1}));
  msg = error_of([&] { data::MNIST(dir.path.string(), false); });
  CHECK(contains(msg, "has 2 images but " + dir / "t10k-labels-idx1-ubyte" + " has 3 labels"));

  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({2}, {7, 12}));
  msg = error_of([&] { data::MNIST(dir.path.string(), false); });
  CHECK(contains(msg, "label 12 at index 1 is not a class in 0..9"));

  // Images and labels swapped: caught by the magic number.
  std::filesystem::remove(dir / "t10k-labels-idx1-ubyte");
  std::filesystem::copy_file(dir / "t10k-images-idx3-ubyte.gz", dir / "t10k-labels-idx1-ubyte.gz");
  msg = error_of([&] { data::MNIST(dir.path.string(), false); });
  CHECK(contains(msg, "wrong magic number 0x00000803"));
}
