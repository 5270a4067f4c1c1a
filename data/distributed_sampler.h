// A sampler that gives each rank its own share of every epoch's permutation,
// as PyTorch's DistributedSampler.
//
//   volt::data::DistributedSampler s(10, /*rank=*/1, /*world_size=*/2, /*seed=*/0);
//   s.next_epoch();  // the odd places of epoch 0's permutation of 0..9: 5 indices
//
// Every rank draws the same permutation (data::RandomSampler::permutation with
// the same seed and epoch) and takes the places rank, rank + world, rank +
// 2 world, ...  When n is not a multiple of world_size the permutation is
// padded with its own first indices (or, with drop_last, cut), so every rank
// gets the same number of indices and runs the same number of steps.
// Concatenating rank 0's batch k, rank 1's batch k, ... gives the
// global batch k of one process that visits the same permutation with a batch
// world_size times larger (the same samples, in another order); the test of
// data-parallel training relies on it.
#pragma once
#include <cstdint>
#include <vector>

#include <volt/data/sampler.h>

namespace volt::data {

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int rank, int world_size, uint64_t seed, bool shuffle = true,
                     bool drop_last = false);
  int64_t size() const override { return n_; }
  int64_t epoch_length() const override { return per_rank_; }  // indices per rank and epoch
  std::vector<int64_t> next_epoch() override;
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t e) { epoch_ = e; }

 private:
  int64_t n_, per_rank_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0;
};

}  // namespace volt::data

namespace volt::dist {
// Beside volt::dist's process group (nn/parallel/dist.h), as PyTorch keeps it
// beside torch.distributed.
using data::DistributedSampler;
}  // namespace volt::dist
