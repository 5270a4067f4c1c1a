// The AMX GEMM's weights packed once per value (tensor/cpu/gemm_amx_weights.h):
// a packed B gives gemm_amx's bits; the cast cache's bf16 copies are packed
// whole on a value's second read and reused, and every writer of a weight (in-place op, data_ptr with
// mark_modified, nn::load, SGD's and Adam's step, a compiled step's update)
// is seen by the next product: its bits equal a fresh pack's.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/skip.h"

#include <volt/jit/step/step.h>
#include <volt/nn/linear.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/gemm_amx.h>
#include <volt/tensor/cpu/gemm_amx_weights.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>
#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;
using namespace volt::cpu;

namespace {

struct PackedOff {  // kept weights packed for every product, for one scope
  PackedOff() { set_amx_packed_weights_enabled(false); }
  ~PackedOff() { set_amx_packed_weights_enabled(true); }
};

struct Threads {
  int prev = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(prev); }
};

// y = bf16(x) bf16(w)^T and dx, the gradient of sum(y * g) with respect to x,
// under eager autocast: the forward reads the weight's copy as W^T, the
// input gradient as W.
std::pair<Tensor, Tensor> forward_backward(const Tensor& x0, const Tensor& w, const Tensor& g) {
  Tensor x = x0.detach().requires_grad_(true);
  Tensor y;
  {
    AutocastGuard amp(kBF16);
    y = linear(x.clone(), w);  // x.clone(): not a leaf, so not in the cast cache (a parameter would be)
    sum(mul(y, g.to(DType::bf16))).backward();
  }
  return {y, x.grad()};
}

// Writer `how` of the weight of `lin`: 0 in place, 1 data_ptr + mark_modified,
// 2 nn::load, 3 an SGD step, 4 an Adam step (which also writes the copy).
void write_weight(int how, nn::Linear& lin, const Tensor& x) {
  Tensor w = lin.weight();
  if (how == 0) {
    NoGradGuard no_grad;
    w.mul_(-0.75);
  } else if (how == 1) {
    float* d = w.data_ptr<float>();
    for (int64_t i = 0; i < w.numel(); i += 5) d[i] = 0.25f;
    w.mark_modified();
  } else if (how == 2) {
    manual_seed(100);
    nn::Linear other(w.size(1), w.size(0), /*bias=*/false);
    const std::string path = "/tmp/volt_test_amx_packed_weights.safetensors";
    nn::save(other, path);
    nn::load(lin, path);
  } else {
    std::unique_ptr<nn::Optimizer> opt;
    if (how == 3) opt = std::make_unique<nn::SGD>(lin.parameters(), nn::SGDOptions{.lr = 0.5});
    else opt = std::make_unique<nn::Adam>(lin.parameters(), nn::AdamOptions{.lr = 0.1});
    opt->zero_grad();
    {
      AutocastGuard amp(kBF16);
      sum(lin(x)).backward();
    }
    opt->step();
  }
}

}  // namespace

TEST_CASE("amx packed B: the GEMM on a B packed once equals gemm_amx bit for bit, any m, both layouts, 1-2 threads") {
  if (!bf16_amx_supported()) VOLT_SKIP("AMX is not available: " + amx_unavailable_reason());
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1, 1);
  // k past one k block (and not a multiple of 32), n past one column group
  // (600 x 1100: 2 groups; 1030 x 500: 2 groups, the last k block short).
  const int64_t shapes[][2] = {{600, 1100}, {37, 29}, {1, 1}, {784, 784}, {1030, 500}};
  for (const auto& [k, n] : shapes)
    for (int transposed = 0; transposed < 2; ++transposed) {
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(transposed);
      std::vector<BF16> b(k * n);
      for (BF16& v : b) v = BF16::from_float(u(gen));
      // B (k, n) read row-major, or as the transpose of an (n, k) weight.
      const int64_t brs = transposed ? 1 : n, bcs = transposed ? k : 1;
      const auto packed = amx_pack_b(b.data(), k, n, brs, bcs);
      for (int threads = 1; threads <= 2; ++threads)
        for (int64_t m : {int64_t(1), int64_t(8), int64_t(45)}) {
          CAPTURE(threads);
          CAPTURE(m);
          Threads t(threads);
          std::vector<BF16> a(m * k);
          for (BF16& v : a) v = BF16::from_float(u(gen));
          std::vector<float> want(m * n), got(m * n, -1.0f);
          gemm_amx(a.data(), m, k, k, 1, b.data(), n, brs, bcs, want.data(), n);
          gemm_amx_packed(a.data(), m, k, k, 1, *packed, got.data(), n);
          CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        }
    }
  // A packed B of another k is refused by name.
  const auto packed = amx_pack_b(std::vector<BF16>(4 * 3).data(), 4, 3, 3, 1);
  std::vector<BF16> a(2 * 5);
  std::vector<float> c(2 * 3);
  CHECK_THROWS_WITH_AS(gemm_amx_packed(a.data(), 2, 5, 5, 1, *packed, c.data(), 3),
                       doctest::Contains("gemm_bf16"), Error);
}

TEST_CASE("amx packed weights: a weight's copy is packed once per value; each writer is seen, bit for bit") {
  if (!bf16_amx_supported()) VOLT_SKIP("AMX is not available: " + amx_unavailable_reason());
  REQUIRE(bf16_gemm() == Bf16Gemm::amx);
  for (int how = 0; how < 5; ++how) {
    CAPTURE(how);
    clear_autocast_cache();
    manual_seed(21);
    const int64_t m = 8, k = 300, n = 40;
    nn::Linear lin(k, n, /*bias=*/false);
    const Tensor w = lin.weight();
    const Tensor x = Tensor::randn({m, k}), g = Tensor::randn({m, n});
    // The reference: the same products, each packing the weight afresh.
    auto fresh = [&] {
      PackedOff off;
      return forward_backward(x, w, g);
    };
    // Three reads of one value: the first packs block by block as gemm_amx
    // does, the second packs whole and keeps, the third uses what is kept.
    auto three_reads = [&] {
      const AmxPackStats s0 = amx_pack_stats();
      const auto [y1, dx1] = forward_backward(x, w, g);
      const AmxPackStats s1 = amx_pack_stats();
      CHECK(s1.packs == s0.packs);
      const auto [y2, dx2] = forward_backward(x, w, g);
      const AmxPackStats s2 = amx_pack_stats();
      CHECK(s2.packs - s1.packs == 2);  // W^T and W
      CHECK(s2.hits == s1.hits);
      const auto [y3, dx3] = forward_backward(x, w, g);
      const AmxPackStats s3 = amx_pack_stats();
      CHECK(s3.packs == s2.packs);  // the same value: nothing packed again
      CHECK(s3.hits - s2.hits == 2);
      const auto [y0, dx0] = fresh();
      for (const Tensor& y : {y1, y2, y3}) CHECK(same_bits(y, y0));
      for (const Tensor& dx : {dx1, dx2, dx3}) CHECK(same_bits(dx, dx0));
      return y0.detach().clone();
    };
    const Tensor before = three_reads();
    // Nothing holds the copy now: the cast cache and Adam write it in place.
    const void* copy = autocast_cached_copy(w).raw_data();
    write_weight(how, lin, x);
    const Tensor after = three_reads();
    CHECK(autocast_cached_copy(w).raw_data() == copy);  // the same storage, a new version
    CHECK_FALSE(same_bits(after, before));               // the write changed the product
  }
  clear_autocast_cache();
  CHECK(amx_pack_stats().storages == 0);  // the packs go with their copies
}

TEST_CASE("amx packed weights: compiled bf16 steps equal steps packing afresh, bit for bit; no tensor allocated") {
  if (!bf16_amx_supported()) VOLT_SKIP("AMX is not available: " + amx_unavailable_reason());
  clear_autocast_cache();
  struct Run {
    std::shared_ptr<nn::MLP> net;
    std::unique_ptr<nn::Adam> opt;
    std::unique_ptr<jit::CompiledStep> step;
  };
  nn::CrossEntropyLoss loss_fn;
  auto make = [&] {
    Run r;
    manual_seed(5);
    r.net = std::make_shared<nn::MLP>(72, std::vector<int64_t>{48, 40, 10});
    r.opt = std::make_unique<nn::Adam>(r.net->parameters(), nn::AdamOptions{.lr = 1e-2});
    nn::MLP& net = *r.net;
    nn::Adam& opt = *r.opt;
    r.step = std::make_unique<jit::CompiledStep>(jit::compile_step(
        [&net, &opt, &loss_fn](const Tensor& x, const Tensor& y) {
          Tensor loss = loss_fn(net(x), y);
          opt.zero_grad();
          loss.backward();
          opt.step();
          return loss;
        },
        {.state = {net, opt}, .reuse_outputs = true, .autocast = kBF16}));
    return r;
  };
  Run kept = make(), afresh = make();
  manual_seed(6);
  const Tensor x = Tensor::randn({8, 72}), y = Tensor::randint(0, 10, {8});
  auto both = [&](int i) {
    CAPTURE(i);
    const double a = (*kept.step)(x, y).item_double();
    double b = 0;
    {
      PackedOff off;
      b = (*afresh.step)(x, y).item_double();
    }
    CHECK(a == b);
    const auto pk = kept.net->parameters(), pa = afresh.net->parameters();
    for (size_t j = 0; j < pk.size(); ++j) CHECK(same_bits(pk[j], pa[j]));
  };
  for (int i = 0; i < 3; ++i) both(i);
  // Steady state: nothing is allocated.  Each step writes every weight, so
  // its products pack each copy once per layout (the forward's W^T, the
  // input gradient's W), as before; the packs serve later reads of the same
  // value, such as the evaluations between steps.
  const uint64_t allocations = Storage::allocation_count();
  (*kept.step)(x, y);
  CHECK(Storage::allocation_count() - allocations == 0);
  {
    PackedOff off;
    (*afresh.step)(x, y);
  }
  auto evaluate = [&](nn::MLP& net) {
    NoGradGuard no_grad;
    AutocastGuard amp(kBF16);
    return net(x);
  };
  const AmxPackStats s0 = amx_pack_stats();
  const Tensor e1 = evaluate(*kept.net), e2 = evaluate(*kept.net);
  const AmxPackStats s1 = amx_pack_stats();
  const Tensor e3 = evaluate(*kept.net);
  const AmxPackStats s2 = amx_pack_stats();
  CHECK(s1.packs - s0.packs == 3);  // the three weights' new values, on their second read
  CHECK(s2.packs == s1.packs);
  CHECK(s2.hits - s1.hits == 3);
  CHECK(same_bits(e1, e2));
  CHECK(same_bits(e1, e3));
  {
    PackedOff off;
    CHECK(same_bits(e1, evaluate(*afresh.net)));
  }
  // A write outside the step: both weights scaled in place.
  for (Run* r : {&kept, &afresh}) {
    NoGradGuard no_grad;
    r->net->parameters()[0].mul_(0.5);
  }
  for (int i = 3; i < 5; ++i) both(i);
  kept = Run{}, afresh = Run{};
  clear_autocast_cache();
}
