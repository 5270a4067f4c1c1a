// The process group's collectives, checked against what each rank computes by itself.
#include <doctest/doctest.h>

#include <volt/nn/parallel/dist.h>
#include <volt/tensor/ops.h>

using namespace volt;

TEST_CASE("dist: rank and world size come from mpirun") {
  REQUIRE(dist::is_available());
  REQUIRE(dist::is_initialized());
  CHECK(dist::world_size() == 2);
  CHECK(dist::rank() >= 0);
  CHECK(dist::rank() < dist::world_size());
  // Both ranks run on this one machine (tests/mpi/run.sh), so their local ranks are their ranks.
  CHECK(dist::local_rank() == dist::rank());
  // Ranks are distinct: their sum is 0 + 1 + ... + (n-1).
  Tensor r = Tensor::full({1}, static_cast<int64_t>(dist::rank()), DType::i64);
  dist::all_reduce(r);
  const int n = dist::world_size();
  CHECK(r.item<int64_t>() == n * (n - 1) / 2);
}

TEST_CASE("dist: all_reduce sums and averages f32, f64 and i64, in place") {
  const int n = dist::world_size(), me = dist::rank();
  // Rank r holds r + 1 + i * (r + 1) at index i.
  auto mine = [](int r, DType dt) {
    std::vector<double> v;
    for (int i = 0; i < 7; ++i) v.push_back((r + 1) + i * (r + 1));
    return Tensor::from_vector(v, {7}).to(dt);
  };
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    CAPTURE(dtype_name(dt));
    Tensor want = Tensor::zeros({7}, DType::f64);
    for (int r = 0; r < n; ++r) want = want + mine(r, DType::f64);
    Tensor s = mine(me, dt);
    void* before = s.raw_data();
    dist::all_reduce(s);
    CHECK(s.raw_data() == before);
    CHECK(s.to_vector<double>() == want.to_vector<double>());
    Tensor a = mine(me, dt);
    dist::all_reduce(a, dist::ReduceOp::Average);
    std::vector<double> avg = want.to_vector<double>();
    for (double& x : avg) x = dt == DType::i64 ? static_cast<double>(static_cast<int64_t>(x) / n) : x / n;
    CHECK(a.to_vector<double>() == avg);
  }
}

TEST_CASE("dist: a strided tensor is reduced through a copy and written back") {
  Tensor base = Tensor::full({3, 4}, 1.0 + dist::rank());
  Tensor col = base.transpose(0, 1);  // (4, 3), not contiguous
  dist::all_reduce(col);
  const double want = dist::world_size() * (dist::world_size() + 1) / 2.0;
  for (float v : base.to_vector<float>()) CHECK(v == want);
}

TEST_CASE("dist: broadcast gives every rank the root's values") {
  for (int root = 0; root < dist::world_size(); ++root) {
    Tensor t = Tensor::full({5}, 10.0 * (dist::rank() + 1));
    dist::broadcast(t, root);
    for (float v : t.to_vector<float>()) CHECK(v == 10.0f * (root + 1));
  }
  Tensor t = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(dist::broadcast(t, 5), doctest::Contains("root 5 is not a rank"), Error);
}

TEST_CASE("dist: all_gather stacks every rank's tensor by rank") {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f * dist::rank(), 2.0f, -1.0f * dist::rank()}, {3});
  Tensor g = dist::all_gather(t);
  REQUIRE(g.sizes() == Shape{dist::world_size(), 3});
  std::vector<float> v = g.to_vector<float>();
  for (int r = 0; r < dist::world_size(); ++r) {
    CHECK(v[static_cast<size_t>(3 * r)] == 1.0f * r);
    CHECK(v[static_cast<size_t>(3 * r + 1)] == 2.0f);
    CHECK(v[static_cast<size_t>(3 * r + 2)] == -1.0f * r);
  }
  dist::barrier();
}

TEST_CASE("dist: a non-blocking all_reduce gives the blocking one's result") {
  Tensor a = Tensor::arange(0, 1000, 1, DType::f32) * (dist::rank() + 1.0);
  Tensor b = a.clone();
  dist::Work w = dist::all_reduce_async(a, dist::ReduceOp::Average);
  CHECK(w.pending());
  dist::all_reduce(b, dist::ReduceOp::Average);  // another collective meanwhile, in the same order everywhere
  w.wait();
  CHECK_FALSE(w.pending());
  CHECK(a.to_vector<float>() == b.to_vector<float>());
}

TEST_CASE("dist: bad input is an error naming the call") {
  Tensor b = Tensor::zeros({3}, DType::b8);
  CHECK_THROWS_WITH_AS(dist::all_reduce(b), doctest::Contains("dist::all_reduce: expected a f32, f64, i32 or i64"), Error);
  Tensor u;
  CHECK_THROWS_WITH_AS(dist::broadcast(u), doctest::Contains("dist::broadcast: expected a tensor with data"), Error);
}

#ifdef VOLT_WITH_CUDA
#include <volt/nn/linear.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/tensor/cuda/runtime.h>

#include <cstdlib>
#include "tests/skip.h"
#endif

// tests/mpi/run.sh runs this once more on the simulated GPU (tests/cudasim).
TEST_CASE("dist: CUDA tensors go through host buffers and stay on their device") {
#ifndef VOLT_WITH_CUDA
  VOLT_SKIP("volt built without CUDA");
#else
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver here");
  }
  // The host-buffer path, whether NCCL is installed or not (test_nccl.cpp tests NCCL's).
  ::setenv("VOLT_NCCL", "0", 1);
  struct Restore {
    ~Restore() { ::unsetenv("VOLT_NCCL"); }
  } restore;
  REQUIRE(dist::backend_name(Device::cuda(0)) == "mpi");
  const Device gpu = Device::cuda(0);
  const int n = dist::world_size(), me = dist::rank();
  Tensor t = Tensor::full({6}, 1.0 + me, DType::f32, gpu);
  dist::all_reduce(t);
  CHECK(t.device() == gpu);
  CHECK(t.to_vector<float>() == std::vector<float>(6, n * (n + 1) / 2.0f));
  Tensor a = Tensor::full({3}, 2.0 * (me + 1), DType::f64, gpu);
  dist::Work w = dist::all_reduce_async(a, dist::ReduceOp::Average);
  w.wait();
  CHECK(a.to_vector<double>() == std::vector<double>(3, n + 1.0));
  Tensor b = Tensor::full({4}, 7.0 * me, DType::f32, gpu);
  dist::broadcast(b, n - 1);
  CHECK(b.to_vector<float>() == std::vector<float>(4, 7.0f * (n - 1)));
  CHECK(dist::all_gather(b).device() == gpu);

  // Data-parallel on the GPU: each rank's gradient of sum(W x_r) is x_r
  // broadcast over the rows; the average is the mean of the ranks' x.
  nn::Linear fc(3, 2, /*bias=*/false);
  fc.to(gpu);
  dist::DistributedDataParallel ddp(fc);
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f + me, 2.0f, -1.0f * me}, {1, 3}).to(gpu);
  fc(x).sum().backward();
  Tensor g = fc.parameters()[0].grad();
  REQUIRE(g.defined());
  CHECK(g.device() == gpu);
  const float m0 = 1.0f + (n - 1) / 2.0f, m2 = -(n - 1) / 2.0f;
  CHECK(g.to_vector<float>() == std::vector<float>{m0, 2.0f, m2, m0, 2.0f, m2});
#endif
}
