// bf16 and f16 on CUDA: not computed there yet, so every op on them says so
// by name (eager ops and the jit's kernels); moving their bits to the device
// and back keeps them.
#include <cstring>

#include "skip_without_gpu.h"
#include <volt/jit/jit.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

TEST_CASE("cuda: bf16 and f16 tensors move to the GPU and back bit for bit; ops on them are a clear error") {
  SKIP_WITHOUT_GPU();
  manual_seed(2);
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = randn({5, 3}, dt);
    const Tensor g = x.to(Device::cuda(0));
    const Tensor back = g.to(kCPU);
    REQUIRE(back.dtype() == dt);
    CHECK(std::memcmp(back.raw_data(), x.raw_data(), 30) == 0);
    const std::string name = dtype_name(dt);
    CHECK_THROWS_WITH_AS(exp(g), doctest::Contains(("exp: " + name + " tensors are not supported on CUDA").c_str()),
                         volt::Error);
    CHECK_THROWS_WITH_AS(matmul(g, g.t()), doctest::Contains("matmul"), volt::Error);
    CHECK_THROWS_WITH_AS(g.to(kF32), doctest::Contains("not supported on CUDA"), volt::Error);
    auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{mul(exp(a[0]), 2.0)}; });
    CHECK_THROWS_WITH_AS(f({g}), doctest::Contains(("generated CUDA kernels do not compute on " + name).c_str()),
                         volt::Error);
  }
}
