// DataLoader: a dataset in batches, in the order a sampler gives, via range-for.
//
//   volt::data::MNIST train(volt::data::mnist_root(), /*train=*/true);
//   volt::data::DataLoader loader(train, 8, volt::data::RandomSampler(train.size(), 0));
//   for (auto& [x, y] : loader) { ... }   // x: f32 (8, 784), y: i64 (8)
//
// Each range-for (each begin()) is a new epoch of the sampler.  A batch is two
// fresh tensors filled row by row with memcpy: no per-sample tensors, and a batch
// stays valid after the loop moves on (a model or lazy graph may still hold it).
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <volt/data/dataset.h>
#include <volt/data/sampler.h>

namespace volt::data {

struct Batch {
  Tensor data;     // (B, *sample_shape), e.g. f32 (B, 784)
  Tensor target;   // (B, *target_shape), e.g. i64 (B)
};

class DataLoader {
 public:
  // The dataset is borrowed and must outlive the loader.  No sampler means
  // SequentialSampler; the last batch may be short unless drop_last.
  DataLoader(const Dataset& dataset, int64_t batch_size, std::shared_ptr<Sampler> sampler = nullptr,
             bool drop_last = false);
  template <std::derived_from<Sampler> S>
  DataLoader(const Dataset& dataset, int64_t batch_size, S sampler, bool drop_last = false)
      : DataLoader(dataset, batch_size, std::make_shared<S>(std::move(sampler)), drop_last) {}
  // A temporary dataset would be gone before the first batch.
  DataLoader(Dataset&&, int64_t, std::shared_ptr<Sampler> = nullptr, bool = false) = delete;
  template <std::derived_from<Sampler> S>
  DataLoader(Dataset&&, int64_t, S, bool = false) = delete;

  int64_t size() const;  // batches per epoch
  int64_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  Sampler& sampler() const { return *sampler_; }
  const Dataset& dataset() const { return dataset_; }

  // One batch of the given samples, in that order.
  Batch make_batch(std::span<const int64_t> indices) const;

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using iterator_category = std::input_iterator_tag;

    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return index_ == o.index_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order,
             int64_t index);
    void load();

    const DataLoader* loader_;
    std::shared_ptr<const std::vector<int64_t>> order_;  // this epoch's indices
    int64_t index_;                                      // batch number within the epoch
    Batch batch_;
  };

  Iterator begin();  // draws the next epoch from the sampler
  Iterator end() const { return Iterator(this, nullptr, size()); }

 private:
  const Dataset& dataset_;
  int64_t batch_size_;
  std::shared_ptr<Sampler> sampler_;
  bool drop_last_;
};

// LibTorch's spelling, for programs ported from it:
//   auto loader = volt::data::make_data_loader<volt::data::RandomSampler>(
//       train, volt::data::DataLoaderOptions().batch_size(64).seed(1));
//   for (auto& batch : *loader) { batch.data; batch.target; }
struct DataLoaderOptions {
  DataLoaderOptions& batch_size(int64_t n) { batch_size_ = n; return *this; }
  DataLoaderOptions& drop_last(bool on) { drop_last_ = on; return *this; }
  DataLoaderOptions& seed(uint64_t s) { seed_ = s; return *this; }  // RandomSampler's seed
  int64_t batch_size_ = 1;
  bool drop_last_ = false;
  uint64_t seed_ = 0;
};

// The sampler is LibTorch's default, a RandomSampler (of options.seed()), unless named.
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(const Dataset& dataset, const DataLoaderOptions& options = {}) {
  std::shared_ptr<Sampler> sampler;
  if constexpr (std::is_same_v<S, RandomSampler>) {
    sampler = std::make_shared<RandomSampler>(dataset.size(), options.seed_);
  } else {
    sampler = std::make_shared<S>(dataset.size());
  }
  return std::make_unique<DataLoader>(dataset, options.batch_size_, std::move(sampler), options.drop_last_);
}
// A temporary dataset would be gone before the first batch.
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(Dataset&&, const DataLoaderOptions& = {}) = delete;

}  // namespace volt::data
