// The CPU kernel of the uniform prim: Philox draws, the same bits as
// tensor/random.cpp and the generated kernels.
#include <algorithm>
#include <type_traits>

#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>
#include <volt/tensor/random.h>
// The Philox text itself (also compiled in random.cpp): inlined here, the draw
// loop vectorises across elements instead of calling out once per element.
#include <volt/tensor/philox.inc>

namespace volt::cpu {
namespace {

// o[i] = U[lo, hi) for element i of the draw (seed, offset): the same expression
// as random.cpp and the generated kernels, inlined so that the ten Philox
// rounds run on vectors of elements.  o: (n)
// o[i] = U[lo, hi) for element first + i of the draw (seed, offset), i < n.
template <class T>
void fill_uniform_block(T* o, int64_t n, uint64_t first, uint64_t seed, uint64_t offset, T lo, T hi) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) o[i] = volt_uniform_range_f32(seed, offset, first + i, lo, hi);
    else o[i] = volt_uniform_range_f64(seed, offset, first + i, lo, hi);
  }
}

// o: (n), element i of the draw (seed, offset) at o[i]: the same expression as
// random.cpp and the generated kernels, inlined so that the ten Philox rounds
// run on vectors of elements (blocks of 4096, split over threads when large).
template <class T>
void fill_uniform(T* o, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  cpu::parallel_for(blocks, kParallelGrain / kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t first = b * kBlock;
      fill_uniform_block(o + first, std::min(kBlock, n - first), static_cast<uint64_t>(first), seed, offset, lo, hi);
    }
  });
}

}  // namespace

void uniform_kernel(const OpCall& call, Tensor& out) {
  const int64_t n = out.numel();
  const Attrs& at = call.attrs;
  if (out.dtype() == DType::f32) {
    fill_uniform(static_cast<float*>(out.raw_data()), n, at.seed, at.offset,
                 static_cast<float>(at.a), static_cast<float>(at.b));
  } else {
    fill_uniform(static_cast<double*>(out.raw_data()), n, at.seed, at.offset, at.a, at.b);
  }
}

}  // namespace volt::cpu
