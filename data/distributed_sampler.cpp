#include <volt/data/distributed_sampler.h>

#include <numeric>

#include <volt/tensor/error.h>

namespace volt::data {

DistributedSampler::DistributedSampler(int64_t n, int rank, int world_size, uint64_t seed, bool shuffle,
                                       bool drop_last)
    : n_(n), rank_(rank), world_(world_size), seed_(seed), shuffle_(shuffle) {
  VOLT_CHECK(n >= 0, "DistributedSampler", "n must be >= 0, got " << n);
  VOLT_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "DistributedSampler",
             "rank " << rank << " is not a rank of a world of " << world_size);
  per_rank_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::next_epoch() {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = data::RandomSampler::permutation(n_, seed_, epoch_);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  ++epoch_;
  const size_t total = static_cast<size_t>(per_rank_ * world_);
  for (size_t i = 0; order.size() < total && n_ > 0; ++i) order.push_back(order[i]);  // pad
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(world_)) mine.push_back(order[i]);
  return mine;
}

}  // namespace volt::data
