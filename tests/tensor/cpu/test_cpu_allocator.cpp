// The CPU allocator's cache of large blocks (tensor/cpu/backend.cpp): a block
// freed by one tensor is handed to the next tensor of the same size, a loop
// whose sizes change every iteration (a model generating one token at a time)
// does not keep a block of every size it used, and a loop that asks for the
// same sizes every iteration (a training step) stops mapping fresh memory.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include <volt/tensor/memory_stats.h>
#include <volt/tensor/tensor.h>

using namespace volt;

namespace {

// This process's resident memory in bytes (Linux's /proc/self/status).
int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}

// Minor page faults of this process so far: one per fresh page touched.
int64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace

TEST_CASE("cpu allocator: a freed large block serves the next tensor of its size") {
  const int64_t n = (1 << 20) / 4 + 16;  // just over 1 MiB of f32
  const void* first = nullptr;
  {
    Tensor a = Tensor::zeros({n});
    first = a.data_ptr<float>();
  }
  CHECK(cpu_cached_bytes() >= uint64_t(n) * 4);
  Tensor b = Tensor::zeros({n});
  CHECK(b.data_ptr<float>() == first);
  CHECK(b.sum().item<double>() == 0.0);  // a reused block is filled as asked
}

TEST_CASE("cpu allocator: sizes that change every iteration do not pile up in the cache") {
  const uint64_t cached_before = cpu_cached_bytes();
  const int64_t rss_before = resident_bytes();
  REQUIRE(rss_before > 0);
  // 128 KiB and 64 bytes more each iteration: sizes no other test asks for
  // (a size another test asked for at regular gaps is kept a while after it,
  // which would add blocks of those sizes to what is measured here).
  const int64_t step = 128 * 1024 / 4 + 16;
  int64_t largest = 0;
  double total = 0;
  for (int64_t i = 1; i <= 100; ++i) {
    Tensor t = Tensor::full({i * step}, 1.0f);  // every page touched
    total += t.sum().item<double>();
    largest = i * step * 4;
  }
  CHECK(total == doctest::Approx(double(step) * 5050));
  // Kept before, one 12.5 MiB block after: not the 632 MiB of every size used.
  CHECK(cpu_cached_bytes() <= cached_before + uint64_t(largest) + 4096);
  CHECK(resident_bytes() - rss_before < 64 * 1024 * 1024);
}

TEST_CASE("cpu allocator: a loop of the same sizes stops faulting in fresh pages (a step's peak demand)") {
  // Each iteration: a (4 MiB) and b (3 MiB) live together, a freed, c (1 MiB)
  // made and freed, b freed.  c's miss in the first iteration must not give
  // back a, whose size the next iteration asks for first (nor may a's miss
  // then give back b and c): giving back the longest-waiting block of any
  // size, every iteration mapped and touched all three afresh (2 048 faults).
  const int64_t mib = (1 << 20) / 4;
  auto iteration = [&] {
    double total = 0;
    Tensor a = Tensor::full({4 * mib + 48}, 1.0f);
    Tensor b = Tensor::full({3 * mib + 48}, 1.0f);
    total += a.sum().item<double>();
    a = Tensor();
    Tensor c = Tensor::full({mib + 48}, 1.0f);
    total += c.sum().item<double>() + b.sum().item<double>();
    return total;
  };
  // Blocks other tests left in the cache are the longest-waiting: enough
  // iterations first that a policy which gives back any block has used them up.
  const int warm = 3 + static_cast<int>(std::min<uint64_t>(cpu_cached_bytes() / (8 << 20), 140));
  for (int i = 0; i < warm; ++i) iteration();
  const int64_t before = minor_faults();
  double total = 0;
  for (int i = 0; i < 5; ++i) total += iteration();
  CHECK(total == doctest::Approx(5.0 * (8 * mib + 144)));
  CHECK(minor_faults() - before < 200);  // the sums' small results, not 5 x 2 048 pages
}
