#include <volt/data/dataloader.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define VOLT_LOADER_MXCSR 1
#endif

#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/serial_guard.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/rng_barrier.h>

namespace volt::data {

namespace {

// One batch of the given samples, in that order.
Batch gather_batch(const Dataset& dataset, std::span<const int64_t> indices) {
  const auto b = static_cast<int64_t>(indices.size());
  Shape data_shape{b}, target_shape{b};
  for (int64_t d : dataset.sample_shape()) data_shape.push_back(d);
  for (int64_t d : dataset.target_shape()) target_shape.push_back(d);
  Batch batch{Tensor::empty(data_shape, dataset.data_dtype()), Tensor::empty(target_shape, dataset.target_dtype())};
  dataset.gather(indices, batch.data, batch.target);
  return batch;
}

}  // namespace

namespace detail {

// One epoch: its order of indices and, with workers, the threads that make its
// batches ahead of the loop.  Batch k goes to slot k % slots; a worker may
// start batch k once the loop has taken batch k - slots, so at most `slots`
// batches wait while the loop uses one.
class Epoch {
 public:
  Epoch(const Dataset& dataset, int64_t batch_size, int64_t batches, std::vector<int64_t> order, int64_t workers)
      : dataset_(dataset), batch_size_(batch_size), batches_(batches), order_(std::move(order)) {
    if (workers <= 0 || batches_ == 0) return;
    slots_.resize(static_cast<size_t>(2 * workers));
#ifdef VOLT_LOADER_MXCSR
    mxcsr_ = _mm_getcsr();  // flush-to-zero and rounding, as the loop's thread has them
#endif
    threads_.reserve(static_cast<size_t>(workers));
    try {
      for (int64_t w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
    } catch (...) {  // no thread to be had: end the ones started
      stop();
      throw;
    }
  }
  ~Epoch() { stop(); }
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  int64_t batches() const { return batches_; }

  // Batch k (0 <= k < batches()), rethrowing the error that making it raised.
  // The loop takes batches in order; any other batch is made here and now.
  Batch take(int64_t k) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (threads_.empty() || k != wanted_) {
      lock.unlock();
      return make(k);
    }
    Slot& slot = slots_[static_cast<size_t>(k) % slots_.size()];
    ready_.wait(lock, [&] { return slot.index == k; });
    Slot got = std::move(slot);
    slot = Slot{};
    wanted_ = k + 1;
    lock.unlock();
    ready_.notify_all();  // slot k % slots is free for batch k + slots
    if (got.error) std::rethrow_exception(got.error);
    return std::move(got.batch);
  }

  // Ends the workers once each has finished the batch it is making; later
  // batches are made by take() on the calling thread.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.clear();
    slots_.clear();  // prefetched batches nobody will take
  }

 private:
  struct Slot {
    int64_t index = -1;  // the batch it holds, once made
    Batch batch;
    std::exception_ptr error;
  };

  Batch make(int64_t k) const {
    const int64_t n = static_cast<int64_t>(order_.size()), start = k * batch_size_;
    const int64_t count = std::min(batch_size_, n - start);
    return gather_batch(dataset_, std::span<const int64_t>(order_.data() + start, count));
  }

  void work() {
#ifdef VOLT_LOADER_MXCSR
    _mm_setcsr(mxcsr_);
#endif
    // A new thread has no mode, no autocast and grad mode on; the first two
    // are said here for the reader, grad mode is turned off (a batch needs no tape).
    ModeGuard eager(nullptr);
    AutocastGuard no_autocast(std::nullopt);
    NoGradGuard no_grad;
    cpu::SerialGuard serial;
    GlobalRngBarrier no_draws("DataLoader worker",
                              "a transform drew from the global random generator; on a worker its draws would "
                              "interleave with the training thread's in an order that depends on timing (use "
                              "workers(0) for random transforms)");
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const auto limit = [&] { return wanted_ + static_cast<int64_t>(slots_.size()); };
      ready_.wait(lock, [&] { return stopping_ || next_ >= batches_ || next_ < limit(); });
      if (stopping_ || next_ >= batches_) return;
      Slot made;
      made.index = next_++;
      lock.unlock();
      try {
        made.batch = make(made.index);
      } catch (...) {
        made.error = std::current_exception();
      }
      lock.lock();
      const int64_t k = made.index;
      slots_[static_cast<size_t>(k) % slots_.size()] = std::move(made);
      ready_.notify_all();
    }
  }

  const Dataset& dataset_;
  const int64_t batch_size_, batches_;
  const std::vector<int64_t> order_;
  std::mutex mutex_;
  std::condition_variable ready_;  // a batch was made, taken, or stop() was called
  std::vector<Slot> slots_;
  int64_t next_ = 0;    // the next batch a worker starts
  int64_t wanted_ = 0;  // the next batch the loop takes
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  unsigned mxcsr_ = 0;
};

}  // namespace detail

DataLoader::DataLoader(const Dataset& dataset, int64_t batch_size, std::shared_ptr<Sampler> sampler,
                       bool drop_last)
    : dataset_(dataset),
      batch_size_(batch_size),
      sampler_(sampler ? std::move(sampler) : std::make_shared<SequentialSampler>(dataset.size())),
      drop_last_(drop_last) {
  VOLT_CHECK(batch_size > 0, "DataLoader", "batch_size must be positive, got " << batch_size);
  // A sampler built for another dataset would silently skip samples or run out of range.
  VOLT_CHECK(sampler_->size() == dataset.size(), "DataLoader",
             "the sampler draws from " << sampler_->size() << " indices but the dataset has "
                                       << dataset.size() << " samples");
}

DataLoader::~DataLoader() {
  if (auto epoch = epoch_.lock()) epoch->stop();
}

DataLoader& DataLoader::workers(int64_t n) {
  VOLT_CHECK(n >= 0, "DataLoader::workers", "expects 0 or more worker threads, got " << n);
  workers_ = n;
  return *this;
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->epoch_length();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

Batch DataLoader::make_batch(std::span<const int64_t> indices) const { return gather_batch(dataset_, indices); }

DataLoader::Iterator DataLoader::begin() {
  // The previous epoch's workers end here; its iterators, if any are left, go on without them.
  if (auto previous = epoch_.lock()) previous->stop();
  auto epoch = std::make_shared<detail::Epoch>(dataset_, batch_size_, size(), sampler_->next_epoch(), workers_);
  epoch_ = epoch;
  return Iterator(std::move(epoch), 0);
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::Epoch> epoch, int64_t index)
    : epoch_(std::move(epoch)), index_(index) {
  if (epoch_) load();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

void DataLoader::Iterator::load() {
  if (!epoch_ || index_ >= epoch_->batches()) {
    batch_ = {};  // past the end: drop the last batch's tensors
    epoch_.reset();  // and the epoch's workers, which have nothing left to make
    return;
  }
  batch_ = epoch_->take(index_);
}

}  // namespace volt::data
