#include <doctest/doctest.h>

#include <algorithm>

#include <volt/data/sampler.h>
#include <volt/nn/parallel/dist.h>
#include <volt/data/distributed_sampler.h>

using namespace volt;

TEST_CASE("DistributedSampler: the ranks' shares partition each epoch's permutation") {
  const int64_t n = 10;
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    std::vector<dist::DistributedSampler> s;
    for (int r = 0; r < world; ++r) s.emplace_back(n, r, world, /*seed=*/42);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const std::vector<int64_t> perm = data::RandomSampler::permutation(n, 42, epoch);
      std::vector<std::vector<int64_t>> share;
      for (auto& x : s) share.push_back(x.next_epoch());
      const size_t per = static_cast<size_t>((n + world - 1) / world);
      // Place i of rank r is place r + i * world of the (padded) permutation.
      for (int r = 0; r < world; ++r) {
        REQUIRE(share[static_cast<size_t>(r)].size() == per);
        for (size_t i = 0; i < per; ++i)
          CHECK(share[static_cast<size_t>(r)][i] == perm[(static_cast<size_t>(r) + i * world) % perm.size()]);
      }
      // Every index is visited; padding repeats only the permutation's first ones.
      std::vector<int64_t> all;
      for (auto& v : share) all.insert(all.end(), v.begin(), v.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      CHECK(all.size() == static_cast<size_t>(n));
    }
  }
}

TEST_CASE("DistributedSampler: drop_last cuts, shuffle=false keeps order, bad ranks are errors") {
  dist::DistributedSampler cut(10, 1, 3, 0, /*shuffle=*/false, /*drop_last=*/true);
  CHECK(cut.size() == 10);
  CHECK(cut.epoch_length() == 3);
  CHECK(cut.next_epoch() == std::vector<int64_t>{1, 4, 7});
  dist::DistributedSampler pad(10, 2, 3, 0, false);
  CHECK(pad.next_epoch() == std::vector<int64_t>{2, 5, 8, 1});  // 10 places + index 0, 1 again
  dist::DistributedSampler a(10, 0, 2, 7);
  a.set_epoch(4);
  const std::vector<int64_t> perm4 = data::RandomSampler::permutation(10, 7, 4);
  CHECK(a.next_epoch() == std::vector<int64_t>{perm4[0], perm4[2], perm4[4], perm4[6], perm4[8]});
  CHECK(a.epoch() == 5);
  CHECK_THROWS_WITH_AS(dist::DistributedSampler(10, 2, 2, 0), doctest::Contains("rank 2 is not a rank of a world of 2"),
                       Error);
}

TEST_CASE("dist: without mpirun's init, collectives say what is missing") {
  if (dist::is_initialized()) return;
  Tensor t = Tensor::ones({2});
  CHECK_THROWS_WITH_AS(dist::all_reduce(t), doctest::Contains("dist::all_reduce"), Error);
}
