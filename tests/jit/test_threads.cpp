// One jitted function called from several threads at once.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

// Runs `threads` threads, each making `calls` calls of jm with batch sizes
// 1..24 (each thread starting at another size), and compares every result
// with the eager network's output for the same input.  Returns the number of
// calls whose result differed.
int64_t hammer(jit::JitFunction& jm, const std::vector<Tensor>& inputs, const std::vector<Tensor>& expected,
               int threads, int calls, bool with_grad) {
  std::atomic<int64_t> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      set_grad_enabled(with_grad);  // grad mode is per thread
      for (int c = 0; c < calls; ++c) {
        size_t b = static_cast<size_t>(t * 7 + c) % inputs.size();
        Tensor y = jm(inputs[b]);
        if (y.sizes() != expected[b].sizes() || y.to_vector<float>() != expected[b].to_vector<float>()) ++wrong;
      }
    });
  for (std::thread& th : pool) th.join();
  return wrong;
}

}  // namespace

TEST_CASE("jit threads: 8 threads x 300 calls of one jitted MLP, batch sizes 1..24, equal eager; counters add up") {
  manual_seed(3);
  auto net = std::make_shared<nn::MLP>(20, std::vector<int64_t>{32, 16, 5}, true, 0.0);
  net->eval();
  std::vector<Tensor> inputs, expected;
  for (int64_t b = 1; b <= 24; ++b) {
    inputs.push_back(Tensor::randn({b, 20}));
    // The eager result under no_grad; the jitted call with gradients enabled
    // runs the augmented forward, which computes the same prims.
    NoGradGuard no_grad;
    expected.push_back(net->forward(inputs.back()));
  }
  // Twice: with gradients (augmented forward + backward node per call) and without.
  for (bool with_grad : {true, false}) {
    CAPTURE(with_grad);
    auto jm = jit::jit(net);
    const int threads = 8, calls = 300;
    CHECK(hammer(jm, inputs, expected, threads, calls, with_grad) == 0);
    CHECK(jit::cache_hits(jm) + jit::cache_misses(jm) == threads * calls);
    // Each batch size compiled once, whatever the interleaving.
    CHECK(jit::cache_misses(jm) == 24);
    CHECK(jm.cache_entries() == 24);
  }
}

TEST_CASE("jit threads: a value guard checked from several threads picks each caller's own branch") {
  auto fn = [](const std::vector<Tensor>& in) {
    if (gt(sum(in[0]), 0.0)) return std::vector<Tensor>{mul(in[0], 2.0)};
    return std::vector<Tensor>{neg(in[0])};
  };
  auto jf = jit::jit(fn, {"x"});
  std::atomic<int64_t> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < 200; ++c) {
        float v = static_cast<float>((t + c) % 5) - 2.0f;  // -2..2: both branches, from every thread
        Tensor x = Tensor::from_vector<float>({v, 1.0f});
        float s = v + 1.0f;
        std::vector<float> want = s > 0 ? std::vector<float>{2 * v, 2.0f} : std::vector<float>{-v, -1.0f};
        if (jf(x).to_vector<float>() != want) ++wrong;
      }
    });
  for (std::thread& th : pool) th.join();
  CHECK(wrong == 0);
  CHECK(jit::cache_hits(jf) + jit::cache_misses(jf) == 8 * 200);
}
