// CUDA events as volt uses them to ask, without waiting, whether the work
// queued before them has run (cudaEventQuery, behind dist::Work::test() on
// NCCL's path).  Runs on a GPU and on tests/cudasim, whose device runs queued
// work only when asked: there the first query of a queued event says "not
// ready", and the next one finds the work done.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>

#include "cuda/skip_without_gpu.h"

using namespace volt;

namespace {

// Queries `e` until it is complete (or 10 s pass); returns the last answer
// and counts the "not ready" ones.
cudaError_t query_until_done(cudaEvent_t e, int* not_ready) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  cudaError_t r;
  while ((r = cudaEventQuery(e)) == cudaErrorNotReady && std::chrono::steady_clock::now() < give_up) {
    ++*not_ready;
    cudaGetLastError();  // "not ready" is no failure: leave nothing behind
  }
  return r;
}

}  // namespace

TEST_CASE("cuda: cudaEventQuery says an event is complete once the work queued before it has run") {
  SKIP_WITHOUT_GPU();
  const Device d = Device::cuda(0);
  cuda::DeviceGuard guard(0);
  cudaEvent_t never = nullptr, e = nullptr;
  REQUIRE(cudaEventCreate(&never) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  CHECK(cudaEventQuery(never) == cudaSuccess);  // never recorded: nothing to wait for

  Tensor a = Tensor::full({1000}, 1.5, DType::f32, d);
  Tensor warm = a * 2.0;  // the kernel compiles outside what is looked at
  cuda::synchronize(0);
  const std::optional<cuda::SimCounters> before = cuda::simulated_counters();
  Tensor b = a * 2.0 + 1.0;
  REQUIRE(cudaEventRecord(e, cuda::stream(0)) == cudaSuccess);
  int not_ready = 0;
  CHECK(query_until_done(e, &not_ready) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaSuccess);  // and stays so
  if (before) {
    // The simulated device had queued the kernels: one "not ready", then done,
    // and the host never waited for it.
    CHECK(not_ready == 1);
    CHECK(cuda::simulated_counters()->host_syncs == before->host_syncs);
  }
  CHECK(b.to(kCPU).to_vector<float>() == std::vector<float>(1000, 4.0f));

  if (before) {
    // While the event's stream records a graph, the query is refused and the
    // capture ends invalidated, as cudaEventSynchronize.
    cudaError_t during = cudaSuccess;
    REQUIRE(cudaEventRecord(e, cuda::stream(0)) == cudaSuccess);
    cuda::Graph g;
    CHECK_THROWS_AS(g.capture(0, [&] { during = cudaEventQuery(e); }), Error);
    CHECK(during == cudaErrorStreamCaptureUnsupported);
    CHECK_FALSE(g.captured());
    cudaGetLastError();
    int n = 0;
    CHECK(query_until_done(e, &n) == cudaSuccess);  // usable afterwards
  }
  cudaEventDestroy(never);
  cudaEventDestroy(e);
}

#endif  // VOLT_WITH_CUDA
