// The CPU backend's flat elementwise loops: operands that are plain or one
// element broadcast to the whole output, in every position, small and large
// enough to split over threads, against loops over the same values; and the
// same bits at any thread count.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

struct ThreadScope {
  int threads = cpu::num_threads();
  ~ThreadScope() { cpu::set_num_threads(threads); }
};

// A one-element tensor broadcast by the op (shape {1}), or a Scalar.
Value scalar_operand(bool as_tensor, float v) {
  if (as_tensor) return Value(Tensor::full({1}, v, DType::f32));
  return Value(Scalar(double(v)));
}

}  // namespace

TEST_CASE("CPU elementwise: a broadcast element in every position, small and threaded, equals the loop") {
  ThreadScope scope;
  // 70 000 elements split over threads (the grain is 32 768), 37 do not.
  for (int64_t n : {37, 70000})
    for (int threads : {1, 2, 3, 4}) {
      cpu::set_num_threads(threads);
      const Tensor a = sample({n}, DType::f32, 11), b = sample({n}, DType::f32, 12);
      const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
      const std::string label = "n=" + std::to_string(n) + " threads=" + std::to_string(threads);
      for (bool as_tensor : {false, true}) {
        const float s = 0.375f;
        const std::vector<float> got_l = mul(scalar_operand(as_tensor, s), a).to_vector<float>();
        const std::vector<float> got_r = sub(a, scalar_operand(as_tensor, s)).to_vector<float>();
        const std::vector<float> got_gt = gt(a, scalar_operand(as_tensor, 0.0f)).to(DType::f32).to_vector<float>();
        int bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          bad += got_l[size_t(i)] != s * av[size_t(i)];
          bad += got_r[size_t(i)] != av[size_t(i)] - s;
          bad += got_gt[size_t(i)] != (av[size_t(i)] > 0.0f ? 1.0f : 0.0f);
        }
        INFO(label << (as_tensor ? " one-element tensor" : " scalar"));
        CHECK(bad == 0);
      }
      // where with each of its three operands broadcast in turn (relu and its gradient).
      const Tensor c = gt(a, 0.0);
      const std::vector<float> w_ab = where(c, a, b).to_vector<float>();
      const std::vector<float> w_a0 = where(c, a, 0.0).to_vector<float>();
      const std::vector<float> w_0b = where(c, 0.0, b).to_vector<float>();
      const std::vector<float> w_c = where(Tensor::full({1}, 1.0, DType::b8), a, b).to_vector<float>();
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool ci = av[size_t(i)] > 0.0f;
        bad += w_ab[size_t(i)] != (ci ? av[size_t(i)] : bv[size_t(i)]);
        bad += w_a0[size_t(i)] != (ci ? av[size_t(i)] : 0.0f);
        bad += w_0b[size_t(i)] != (ci ? 0.0f : bv[size_t(i)]);
        bad += w_c[size_t(i)] != av[size_t(i)];
      }
      INFO("where " << label);
      CHECK(bad == 0);
    }
}

TEST_CASE("CPU elementwise: relu and dropout give the same bits at 1 to 4 threads") {
  ThreadScope scope;
  const Tensor x = sample({300, 784}, DType::f32, 21);
  cpu::set_num_threads(1);
  const std::vector<float> r1 = relu(x).to_vector<float>();
  manual_seed(7);
  const std::vector<float> d1 = dropout(x, 0.25, true).to_vector<float>();
  for (int threads : {2, 3, 4}) {
    cpu::set_num_threads(threads);
    manual_seed(7);
    const std::vector<float> d = dropout(x, 0.25, true).to_vector<float>();
    const std::vector<float> r = relu(x).to_vector<float>();
    INFO("threads=" << threads);
    CHECK(std::memcmp(r.data(), r1.data(), r1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(d.data(), d1.data(), d1.size() * sizeof(float)) == 0);
  }
  // And dropout is what its rule says: zero or x / (1 - p).
  int bad = 0, dropped = 0;
  const std::vector<float> xv = x.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    if (d1[i] == 0.0f && xv[i] != 0.0f) ++dropped;
    else bad += d1[i] != xv[i] * float(1.0 / 0.75);
  }
  CHECK(bad == 0);
  CHECK(dropped > int(xv.size()) / 5);
  CHECK(dropped < int(xv.size()) * 3 / 10);
}
