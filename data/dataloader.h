// DataLoader: a dataset in batches, in the order a sampler gives, via range-for.
//
//   volt::data::MNIST train(volt::data::mnist_root(), /*train=*/true);
//   volt::data::DataLoader loader(train, 8, volt::data::RandomSampler(train.size(), 0));
//   loader.workers(2);                    // optional: batches made ahead, on 2 threads
//   for (auto& [x, y] : loader) { ... }   // x: f32 (8, 784), y: i64 (8)
//
// Each range-for (each begin()) is a new epoch of the sampler.  A batch is two
// fresh tensors filled row by row with memcpy: no per-sample tensors, and a batch
// stays valid after the loop moves on (a model or lazy graph may still hold it).
//
// Workers.  With workers(n), n >= 1, n threads make the batches ahead of the
// loop (up to 2n of them while the loop uses one) and the loop takes them in
// order: the same batches, bit for bit, as workers(0), which makes each on
// the calling thread when the loop asks for it.  A worker runs plain eager CPU
// ops whatever the loop's thread is doing (a jit trace, the lazy device,
// autocast, grad mode: those are the loop thread's own and are neither seen
// nor changed by a worker), with the loop thread's floating-point mode
// (flush-to-zero), serially (the CPU thread pool stays free for the
// training thread), and without the global random generator: a transform that
// draws from it fails with a volt::Error rather than giving batches that
// depend on timing.  Transforms may run on several workers at once, so they
// must not change shared state.  An error while making batch k is thrown by
// the loop at batch k, as with workers(0).  Leaving the loop early, a new
// begin() and destroying the loader stop the workers (a batch being made is
// finished first); an iterator of an epoch whose workers were stopped by a
// later begin() still gives its batches, made on the calling thread.
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

namespace detail {
class Epoch;  // one begin()'s order and, with workers, its threads (dataloader.cpp)
}

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
  ~DataLoader();  // stops the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Threads that make batches ahead of the loop (0: none, the default); takes
  // effect at the next begin().
  DataLoader& workers(int64_t n);
  int64_t workers() const { return workers_; }

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
    Iterator(std::shared_ptr<detail::Epoch> epoch, int64_t index);
    void load();

    std::shared_ptr<detail::Epoch> epoch_;  // this epoch's order (and workers); none for end()
    int64_t index_;                         // batch number within the epoch
    Batch batch_;
  };

  Iterator begin();  // draws the next epoch from the sampler
  Iterator end() const { return Iterator(nullptr, size()); }

 private:
  const Dataset& dataset_;
  int64_t batch_size_;
  std::shared_ptr<Sampler> sampler_;
  bool drop_last_;
  int64_t workers_ = 0;
  // The latest begin()'s epoch, held by its iterators: the loop ending frees it.
  std::weak_ptr<detail::Epoch> epoch_;
};

// LibTorch's spelling, for programs ported from it:
//   auto loader = volt::data::make_data_loader<volt::data::RandomSampler>(
//       train, volt::data::DataLoaderOptions().batch_size(64).workers(2).seed(1));
//   for (auto& batch : *loader) { batch.data; batch.target; }
struct DataLoaderOptions {
  DataLoaderOptions& batch_size(int64_t n) { batch_size_ = n; return *this; }
  DataLoaderOptions& drop_last(bool on) { drop_last_ = on; return *this; }
  DataLoaderOptions& seed(uint64_t s) { seed_ = s; return *this; }  // RandomSampler's seed
  DataLoaderOptions& workers(size_t n) { workers_ = static_cast<int64_t>(n); return *this; }  // DataLoader::workers
  int64_t batch_size_ = 1;
  bool drop_last_ = false;
  uint64_t seed_ = 0;
  int64_t workers_ = 0;
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
  auto loader = std::make_unique<DataLoader>(dataset, options.batch_size_, std::move(sampler), options.drop_last_);
  loader->workers(options.workers_);
  return loader;
}
// A temporary dataset would be gone before the first batch.
template <std::derived_from<Sampler> S = RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(Dataset&&, const DataLoaderOptions& = {}) = delete;

}  // namespace volt::data
