// cross_entropy's options on the CUDA backend (its fused kernels, with
// autograd): values against the f64 loops of tests/nn/cross_entropy_reference.h,
// gradients against the CPU kernel.  Skipped with a message where no GPU answers.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>

#include <volt/jit/jit.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/nn/cross_entropy_reference.h"
#include "tests/skip.h"

using namespace volt;

TEST_CASE("cuda: cross_entropy options (reduction, ignore_index, label_smoothing) match f64 loops and the CPU") {
  if (!cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  const Device gpu = Device::cuda(0);
  manual_seed(23);
  const int64_t n = 6, c = 5;
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::randn({n, c}, dt) * 2.0;
    const std::vector<double> xv = x.to_vector<double>();
    for (const testing::CeCase& k : testing::ce_cases()) {
      INFO(dtype_name(dt) << " " << k.label());
      const std::vector<int64_t> tv = testing::ce_targets(k.options.ignore_index, c);
      Tensor t = Tensor::from_vector<int64_t>(tv);
      const std::vector<double> want = testing::reference_ce(xv, n, c, tv, k.options);
      Tensor xg = x.to(gpu).requires_grad_(true);
      Tensor loss = cross_entropy(xg, t.to(gpu), k.options);
      std::vector<double> got = loss.to(kCPU).to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(dt == DType::f32 ? 2e-6 : 1e-12));
      // The gradient of sum(loss * w) against the CPU kernel's.
      Tensor w = Tensor::randn(loss.sizes(), dt);
      sum(mul(loss, w.to(gpu))).backward();
      Tensor xc = x.detach().requires_grad_(true);
      sum(mul(cross_entropy(xc, t, k.options), w)).backward();
      const std::vector<double> gg = xg.grad().to(kCPU).to_vector<double>(), gc = xc.grad().to_vector<double>();
      for (size_t i = 0; i < gg.size(); ++i)
        CHECK(gg[i] == doctest::Approx(gc[i]).epsilon(dt == DType::f32 ? 1e-5 : 1e-12).scale(1e-6));
    }
  }
  // Under the jit on the GPU (the decomposition, fused by nvrtc): two of the cases.
  Tensor x32 = Tensor::randn({n, c}) * 2.0;
  for (const CrossEntropyOptions& o : {CrossEntropyOptions{Reduction::Sum, -1, 0.2},
                                       CrossEntropyOptions{Reduction::None, 1, 0.0}}) {
    INFO("jit " << testing::CeCase{o}.label());
    const std::vector<int64_t> tv = testing::ce_targets(o.ignore_index, c);
    const std::vector<double> want = testing::reference_ce(x32.to_vector<double>(), n, c, tv, o);
    auto f = jit::jit([o](const std::vector<Tensor>& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1], o)}; });
    std::vector<double> got = f({x32.to(gpu), Tensor::from_vector<int64_t>(tv).to(gpu)})[0].to(kCPU).to_vector<double>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(2e-6));
  }
  // ignore_index skips a row's target check; any other value out of range is reported.
  Tensor x = Tensor::zeros({3, 3}, DType::f32, gpu);
  CHECK(cross_entropy(x, Tensor::from_vector<int64_t>({2, -1, 0}).to(gpu), {.ignore_index = -1}).item<float>() ==
        doctest::Approx(std::log(3.0)));
  CHECK_THROWS_WITH_AS(
      cross_entropy(x, Tensor::from_vector<int64_t>({7, -1, 0}).to(gpu), {.ignore_index = -1}).item<float>(),
      doctest::Contains("cross_entropy: target values must lie in [0, 3), got 7"), volt::Error);
}
#endif
