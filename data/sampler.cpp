#include <volt/data/sampler.h>

#include <numeric>
#include <utility>

#include <volt/tensor/error.h>

namespace volt::data {
namespace {

// splitmix64 (Steele, Lea & Flood 2014): tiny, fast and well mixed, enough for shuffling.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  VOLT_CHECK(n >= 0, "SequentialSampler", "size must be >= 0, got " << n);
}

std::vector<int64_t> SequentialSampler::next_epoch() {
  std::vector<int64_t> order(n_);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  VOLT_CHECK(n >= 0, "RandomSampler", "size must be >= 0, got " << n);
}

std::vector<int64_t> RandomSampler::next_epoch() { return permutation(n_, seed_, epoch_++); }

std::vector<int64_t> RandomSampler::permutation(int64_t n, uint64_t seed, int64_t epoch) {
  // Hash the epoch into the seed so neighbouring (seed, epoch) pairs give unrelated streams.
  uint64_t e = static_cast<uint64_t>(epoch);
  uint64_t state = seed ^ splitmix64(e);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates.  The modulo's bias is below n / 2^64: invisible for any dataset.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace volt::data
