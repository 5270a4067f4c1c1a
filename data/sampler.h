// Samplers decide the order in which a DataLoader visits a dataset's indices.
//
//   volt::data::RandomSampler s(5, /*seed=*/42);
//   s.next_epoch();   // e.g. {3, 0, 4, 1, 2}
//   s.next_epoch();   // another permutation; the same two for seed 42 every run
#pragma once
#include <cstdint>
#include <vector>

namespace volt::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual int64_t size() const = 0;  // the number of indices it draws from (the dataset's size)
  // How many indices next_epoch() gives: size(), or fewer for one rank's
  // share (data/distributed_sampler.h).
  virtual int64_t epoch_length() const { return size(); }
  // The indices of the next epoch, in visiting order.
  virtual std::vector<int64_t> next_epoch() = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> next_epoch() override;

 private:
  int64_t n_;
};

// A fresh permutation of 0..n-1 each epoch.  Epoch e's order depends only on
// (seed, e) — a private splitmix64 stream, not the global generator — so runs
// reproduce and drawing other random numbers never changes the data order.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> next_epoch() override;

  int64_t epoch() const { return epoch_; }   // the epoch next_epoch() returns
  void set_epoch(int64_t e) { epoch_ = e; }  // e.g. to resume a run
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace volt::data
