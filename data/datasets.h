// LibTorch's dataset chain, for programs ported from it:
//
//   auto train = volt::data::datasets::MNIST(root)                      // samples (1, 28, 28)
//                    .map(volt::data::transforms::Normalize<>(0.1307, 0.3081))
//                    .map(volt::data::transforms::Stack<>());
//   const size_t n = train.size().value();                               // 60000
//   auto loader = volt::data::make_data_loader<volt::data::samplers::RandomSampler>(
//       std::move(train), 64);                                           // the loader owns it
//   for (auto& batch : *loader) { batch.data; batch.target; }            // (64, 1, 28, 28), (64)
//
// map() composes lazily, as LibTorch's does: the images stay u8 and each
// batch is converted to f32 and normalised when it is gathered (on the
// batch, not per sample, and never over the whole set).  A volt batch is
// stacked already, so Stack<> changes nothing: it is there so that the
// LibTorch spelling reads the same.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/data/dataloader.h>
#include <volt/data/dataset.h>
#include <volt/data/sampler.h>

namespace volt::data {

namespace transforms {

// (x - mean[c]) / stddev[c] over channel c (dim 1 of the data (N, C, ...));
// one mean and one stddev apply to every element.  Target is LibTorch's
// template parameter (the target's type), kept for the spelling Normalize<>.
template <class Target = Tensor>
class Normalize {
 public:
  Normalize(double mean, double stddev) : mean_{mean}, stddev_{stddev} {}
  Normalize(std::vector<double> mean, std::vector<double> stddev)
      : mean_(std::move(mean)), stddev_(std::move(stddev)) {}
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stddev() const { return stddev_; }

 private:
  std::vector<double> mean_, stddev_;
};

// Collates samples into one batch tensor: what every volt DataLoader does already.
template <class ExampleType = Example>
struct Stack {};

}  // namespace transforms

namespace datasets {

// An in-memory image dataset held by value (its pixels shared by copies), with
// LibTorch's map() and an optional size.  map(Normalize) adds a per-batch
// transform; it copies no data.
class MapDataset {
 public:
  explicit MapDataset(ImageDataset data) : data_(std::move(data)) {}
  template <class T>
  MapDataset map(const transforms::Normalize<T>& t) const {
    return normalized(t.mean(), t.stddev());
  }
  template <class E>
  MapDataset map(const transforms::Stack<E>&) const {
    return *this;
  }
  std::optional<size_t> size() const { return static_cast<size_t>(data_.size()); }
  const ImageDataset& dataset() const { return data_; }

 private:
  MapDataset normalized(const std::vector<double>& mean, const std::vector<double>& stddev) const;
  ImageDataset data_;
};

// MNIST as LibTorch's torch::data::datasets::MNIST gives it: images f32
// (1, 28, 28) in [0, 1], targets i64; the files as data::MNIST reads them
// (kept as u8, converted per batch).
class MNIST : public MapDataset {
 public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);
  bool is_train() const { return mode_ == Mode::kTrain; }

 private:
  Mode mode_;
};

}  // namespace datasets

namespace samplers {
using data::RandomSampler;
using data::Sampler;
using data::SequentialSampler;
}  // namespace samplers

namespace detail {
struct OwnedDataset {
  ImageDataset dataset;
};
}  // namespace detail

// A DataLoader that owns its dataset (made by make_data_loader from a moved one).
class OwningDataLoader : private detail::OwnedDataset, public DataLoader {
 public:
  OwningDataLoader(ImageDataset dataset, int64_t batch_size, std::shared_ptr<Sampler> sampler, bool drop_last)
      : detail::OwnedDataset{std::move(dataset)},
        DataLoader(detail::OwnedDataset::dataset, batch_size, std::move(sampler), drop_last) {}
  OwningDataLoader(const OwningDataLoader&) = delete;
  OwningDataLoader& operator=(const OwningDataLoader&) = delete;
};

namespace detail {
template <class S>
std::shared_ptr<Sampler> make_sampler(int64_t size, uint64_t seed) {
  if constexpr (std::is_same_v<S, RandomSampler>) {
    return std::make_shared<RandomSampler>(size, seed);
  } else {
    return std::make_shared<S>(size);
  }
}
}  // namespace detail

// LibTorch's make_data_loader(std::move(dataset), options) and
// make_data_loader(std::move(dataset), batch_size): the loader keeps the dataset.
// The sampler is a RandomSampler (LibTorch's default) unless named.
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<OwningDataLoader> make_data_loader(datasets::MapDataset&& dataset,
                                                   const DataLoaderOptions& options = {}) {
  const ImageDataset& d = dataset.dataset();
  auto loader = std::make_unique<OwningDataLoader>(d, options.batch_size_, detail::make_sampler<S>(d.size(), options.seed_),
                                                   options.drop_last_);
  loader->workers(options.workers_);
  return loader;
}
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<OwningDataLoader> make_data_loader(datasets::MapDataset&& dataset, int64_t batch_size) {
  return make_data_loader<S>(std::move(dataset), DataLoaderOptions().batch_size(batch_size));
}
// A borrowed dataset with a plain batch size.
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(const Dataset& dataset, int64_t batch_size) {
  return make_data_loader<S>(dataset, DataLoaderOptions().batch_size(batch_size));
}

}  // namespace volt::data
