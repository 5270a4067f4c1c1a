// The caching allocator's size classes (no GPU needed); its steady state on a
// GPU is checked in test_cuda_ops.cpp.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/allocator.h>

using volt::cuda::size_class;

TEST_CASE("cuda allocator: size classes cover the request with bounded waste") {
  CHECK(size_class(0) == 512);
  CHECK(size_class(1) == 512);
  CHECK(size_class(512) == 512);
  CHECK(size_class(513) == 1024);
  CHECK(size_class(1 << 20) == (1 << 20));
  CHECK(size_class((1 << 20) + 1) == (1 << 20) + (1 << 18));  // quarter steps above 1 MiB
  CHECK(size_class(size_t(3) << 20) == size_t(3) << 20);
  size_t prev = 0;
  for (size_t n = 1; n < (size_t(64) << 20); n = n * 5 / 4 + 7) {
    size_t c = size_class(n);
    CHECK(c >= n);
    CHECK(c >= prev);  // monotonic: a larger request never gets a smaller block
    CHECK(c - n < (n < (1 << 20) ? 512 : n / 4 + 1));
    prev = c;
  }
  // The seed MLP's 784x784 f32 weight (2.35 MiB) lands in the 2.5 MiB class.
  CHECK(size_class(784 * 784 * 4) == size_t(5) << 19);
}
#endif  // VOLT_WITH_CUDA
