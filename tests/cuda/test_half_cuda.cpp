// bf16 and f16 on CUDA against the CPU, which is the reference.  Where both
// devices load the 16-bit values into f32, compute in f32 and round once
// (elementwise ops, conversions, reductions, fills, draws, the jit's fused
// kernels), the results are equal bit for bit.  GEMMs accumulate in f32 in
// another order than the CPU's bf16 GEMM, so they are checked against an f64
// loop over the same 16-bit inputs instead, within one unit in the last place
// of the 16-bit result plus the f32 sum's own error; cross-entropy (computed
// through f32) within one unit in the last place.
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "skip_without_gpu.h"
#include <volt/jit/autocast.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

const Device kGPU = Device::cuda(0);
constexpr DType kHalves[] = {DType::bf16, DType::f16};

// The relative size of one unit in the last place of a 16-bit type at 1.0.
double ulp(DType t) { return t == DType::bf16 ? 0x1p-7 : 0x1p-10; }

// got and want, same dtype and shape, have the same bytes, except that a NaN
// matches any NaN: its sign and payload are the hardware's (an x86 CPU makes
// the negative default NaN, an H200 the positive one).
void check_bits(const std::string& label, const Tensor& got, const Tensor& want) {
  INFO(label);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const Tensor g = got.to(kCPU).contiguous(), w = want.contiguous();
  const size_t n = static_cast<size_t>(w.numel()) * dtype_size(w.dtype());
  bool same = std::memcmp(g.raw_data(), w.raw_data(), n) == 0;
  std::string where;
  if (!same) {
    const std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
    for (size_t i = 0; i < gv.size() && where.empty(); ++i)
      if (!(gv[i] == wv[i]) && !(std::isnan(gv[i]) && std::isnan(wv[i])))
        where = "element " + std::to_string(i) + ": got " + std::to_string(gv[i]) + ", want " + std::to_string(wv[i]);
  }
  CHECK_MESSAGE((same || where.empty()), label << ": not bit-equal; first differing value at " << where);
}

// got (16-bit) against want (16-bit, the CPU's) within `ulps` units in the last place.
void check_ulps(const std::string& label, const Tensor& got, const Tensor& want, double ulps) {
  INFO(label);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = got.to(kCPU).to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(g[i] - w[i]) / (ulp(want.dtype()) * std::max(std::fabs(w[i]), 1e-3)));
  CHECK_MESSAGE(worst <= ulps, label << ": worst difference " << worst << " units in the last place");
}

// A view with the same sizes, strides and offset on the GPU (its storage copied).
Tensor same_layout_on_gpu(const Tensor& t) {
  if (t.is_contiguous()) return t.to(kGPU);
  const int64_t elems = static_cast<int64_t>(t.impl()->storage->nbytes / dtype_size(t.dtype()));
  Tensor flat = make_tensor(t.impl()->storage, {elems}, {1}, 0, t.dtype(), kCPU).to(kGPU);
  return make_tensor(flat.impl()->storage, t.sizes(), t.strides(), t.storage_offset(), t.dtype(), kGPU);
}

// The prim on the CPU and, its tensors moved (zero-dim ones stay on the CPU), on the GPU.
void compare_prim(const std::string& label, const OpCall& cpu_call) {
  OpCall gpu_call = cpu_call;
  for (Value& v : gpu_call.args)
    if (v.is_tensor && v.tensor.dim() > 0) v.tensor = same_layout_on_gpu(v.tensor);
  const Tensor want = run_prim(cpu_call)[0];
  const Tensor got = run_prim(gpu_call)[0];
  CHECK(got.device() == kGPU);
  // pow is the one function here that neither the CPU's libm nor CUDA's rounds
  // correctly: an f32 result may differ in its last bit (seen on an H200), so
  // it is held to one unit of the output's type; every other op to its bits.
  if (cpu_call.op == OpId::pow && want.dtype() == DType::f32) {
    INFO(label);
    const std::vector<double> g = got.to(kCPU).contiguous().to_vector<double>(), w = want.contiguous().to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i)
      CHECK((std::fabs(g[i] - w[i]) <= 0x1p-23 * std::fabs(w[i]) || (std::isnan(g[i]) && std::isnan(w[i]))));
    return;
  }
  check_bits(label, got, want);
}

// Values in [-2, 2) of dtype t, some of them exact ties of the 16-bit type.
Tensor values(DType t, const Shape& s) { return sub(mul(Tensor::rand(s, DType::f64), 4.0), 2.0).to(t); }

// C = A B in f64 from the (16-bit) values of a (..., m, k) and b (..., k, n), 2-D or batched alike.
std::vector<double> gemm_f64(const Tensor& a, const Tensor& b, int64_t batches, int64_t m, int64_t k, int64_t n) {
  const std::vector<double> av = a.to(kCPU).contiguous().to_vector<double>();
  const std::vector<double> bv = b.to(kCPU).contiguous().to_vector<double>();
  std::vector<double> c(static_cast<size_t>(batches * m * n));
  for (int64_t p = 0; p < batches; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += av[(p * m + i) * k + q] * bv[(p * k + q) * n + j];
        c[(p * m + i) * n + j] = s;
      }
  return c;
}

// got (16-bit) against the exact product: a unit and a half of rounding, plus f32's
// error in a sum of k terms relative to the sum of their magnitudes.
void check_gemm(const std::string& label, const Tensor& got, const std::vector<double>& want,
                const std::vector<double>& magnitude, int64_t k) {
  INFO(label);
  const std::vector<double> g = got.to(kCPU).contiguous().to_vector<double>();
  REQUIRE(g.size() == want.size());
  const double u = ulp(got.dtype());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    // A unit and a half.  cuBLAS's default math (PyTorch's too) lets a GEMM
    // with a 16-bit output sum split-k partials in that type, and for a small
    // output its heuristic splits k: on an H200, 64 x 129 x 31 in bf16 was 4.1
    // units from f64 that way; volt's math mode disallows it
    // (tensor/cuda/runtime.cpp), which leaves one rounding of the f32 sum.
    const double allowed = 1.5 * u * std::fabs(want[i]) + static_cast<double>(k + 2) * 0x1p-24 * magnitude[i] + 1e-30;
    worst = std::max(worst, std::fabs(g[i] - want[i]) / allowed);
  }
  CHECK_MESSAGE(worst <= 1.0, label << ": worst error " << worst << " of the allowed");
}

}  // namespace

TEST_CASE("cuda: bf16 and f16 move to the GPU and back bit for bit and convert there as on the CPU") {
  SKIP_WITHOUT_GPU();
  manual_seed(2);
  // Specials, ties of both types, f16's subnormals and overflow, and random values.
  std::vector<float> special{0.0f, -0.0f, 1.0f, -1.5f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f, 1e6f,
                             1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-7f, 1.0f + 0x1p-11f, 0x1p-24f, 0x1p-25f,
                             0x1.8p-25f, 3e-7f, 1e-40f, -6.1e-5f, 3.3333333f};
  Tensor f32 = cat({Tensor::from_vector<float>(special), mul(Tensor::randn({200}), 50.0)}, 0);
  Tensor f64 = cat({f32.to(DType::f64), add(Tensor::randn({64}, DType::f64), 1e-9)}, 0);
  for (DType dt : kHalves) {
    const std::string name = dtype_name(dt);
    CAPTURE(name);
    const Tensor x = Tensor::randn({5, 3}, dt);
    check_bits("to the GPU and back", x.to(kGPU).to(kCPU), x);
    check_bits("f32 -> 16-bit", f32.to(kGPU).to(dt), f32.to(dt));
    check_bits("f64 -> 16-bit", f64.to(kGPU).to(dt), f64.to(dt));
    const Tensor h = f32.to(dt);
    check_bits("16-bit -> f32", h.to(kGPU).to(DType::f32), h.to(DType::f32));
    check_bits("16-bit -> f64", h.to(kGPU).to(DType::f64), h.to(DType::f64));
    // A value with no i64 (NaN, the infinities) converts as the hardware does,
    // as in PyTorch: the CPU's is INT64_MIN, a GPU's saturates; the others exactly.
    const Tensor in_range = where(lt(abs(h.to(DType::f32)), 1e18), h, Tensor::zeros({1}, dt));
    check_bits("16-bit -> i64", in_range.to(kGPU).to(DType::i64), in_range.to(DType::i64));
    const Tensor ints = Tensor::randint(-70000, 70000, {99}, DType::i32);
    check_bits("i32 -> 16-bit", ints.to(kGPU).to(dt), ints.to(dt));
    const DType other = dt == DType::bf16 ? DType::f16 : DType::bf16;
    check_bits("16-bit -> the other 16-bit type", h.to(kGPU).to(other), h.to(other));
    check_bits("a strided copy", h.reshape({-1, 4}).t().to(kGPU).contiguous(), h.reshape({-1, 4}).t().contiguous());
  }
}

TEST_CASE("cuda: bf16 and f16 elementwise ops match the CPU bit for bit (strided, broadcast, scalars, mixed)") {
  SKIP_WITHOUT_GPU();
  manual_seed(3);
  int compared = 0;
  for (DType dt : kHalves)
    for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
      const OpId op = static_cast<OpId>(i);
      const std::string base = std::string(op_name(op)) + " " + dtype_name(dt);
      Tensor a = values(dt, {6, 5}), b = values(dt, {6, 5}), at = values(dt, {5, 6}).t(), row = values(dt, {5});
      Tensor cond = lt(Tensor::rand({6, 5}), 0.5);
      switch (op_info(op).kind) {
        case OpKind::Unary:
          compare_prim(base + " transposed", OpCall{op, {at}, {}});
          ++compared;
          break;
        case OpKind::Binary:
        case OpKind::Compare:
          compare_prim(base + " transposed and broadcast", OpCall{op, {at, row}, {}});
          compare_prim(base + " scalar", OpCall{op, {a, Value(1.5)}, {}});
          compare_prim(base + " with f32", OpCall{op, {a, values(DType::f32, {6, 5})}, {}});
          compared += 3;
          break;
        case OpKind::Ternary:
          compare_prim(base, OpCall{op, {cond, a, b}, {}});
          compare_prim(base + " scalar", OpCall{op, {cond, at, Value(-0.25)}, {}});
          compared += 2;
          break;
        default:
          break;
      }
    }
  MESSAGE(compared << " prim calls compared");
  CHECK(compared > 80);
}

TEST_CASE("cuda: bf16 and f16 reductions, fills, padding and draws match the CPU bit for bit") {
  SKIP_WITHOUT_GPU();
  manual_seed(4);
  for (DType dt : kHalves) {
    const std::string name = dtype_name(dt);
    CAPTURE(name);
    const Tensor x = values(dt, {7, 300, 3}).permute({2, 0, 1});  // [3, 7, 300], strided
    const Tensor xg = same_layout_on_gpu(x);
    for (int64_t d : {0, 1, 2}) {
      check_bits("sum", xg.sum({d}), x.sum({d}));
      check_bits("amax", xg.amax({d}), x.amax({d}));
      check_bits("argmax", xg.argmax(d), x.argmax(d));
    }
    check_bits("sum of all", xg.sum(), x.sum());
    check_bits("full", Tensor::full({3, 4}, 1.0 / 3, dt, kGPU), Tensor::full({3, 4}, 1.0 / 3, dt));
    check_bits("zeros", Tensor::zeros({9}, dt, kGPU), Tensor::zeros({9}, dt));
    // pad is narrow's gradient.
    OpCall pad{OpId::pad, {values(dt, {3, 4})}, {}};
    pad.attrs.ints = {1, 2, 9};
    compare_prim("pad", pad);
    // Draws: the f32 draw rounded once and kept below the range's top.
    manual_seed(11);
    const Tensor cpu = Tensor::rand({1000, 37}, dt);
    manual_seed(11);
    const Tensor gpu = Tensor::rand({1000, 37}, dt, kGPU);
    check_bits("rand", gpu, cpu);
    CHECK(gpu.to(DType::f32).amax().item<float>() < 1.0f);
  }
}

TEST_CASE("cuda: bf16 and f16 GEMMs (matmul, linear, batched, backward) at odd shapes match an f64 loop") {
  SKIP_WITHOUT_GPU();
  manual_seed(5);
  for (DType dt : kHalves) {
    const std::string name = dtype_name(dt);
    CAPTURE(name);
    for (auto [m, k, n] : {std::array<int64_t, 3>{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 129, 31}}) {
      const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      const Tensor a = values(dt, {m, k}), b = values(dt, {k, n});
      const std::vector<double> want = gemm_f64(a, b, 1, m, k, n);
      const std::vector<double> mag = gemm_f64(a.abs(), b.abs(), 1, m, k, n);
      check_gemm("matmul " + shape, matmul(a.to(kGPU), b.to(kGPU)), want, mag, k);
      // The same product from transposed views (cuBLAS reads them with op T).
      const Tensor a_t = a.t().contiguous().to(kGPU).t(), b_t = b.t().contiguous().to(kGPU).t();
      check_gemm("matmul of transposed views " + shape, matmul(a_t, b_t), want, mag, k);
      // linear: x w^T + bias.
      const Tensor bias = values(dt, {n});
      std::vector<double> lw = want, lmag = mag;
      const std::vector<double> bv = bias.to_vector<double>();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          lw[i * n + j] += bv[j];
          lmag[i * n + j] += std::fabs(bv[j]);
        }
      check_gemm("linear " + shape, linear(a.to(kGPU), b.t().contiguous().to(kGPU), bias.to(kGPU)), lw, lmag, k);
    }
    // Batched, with a broadcast batch dim: (4, 1, 5, 7) @ (3, 7, 6).
    const Tensor a = values(dt, {4, 1, 5, 7}), b = values(dt, {3, 7, 6});
    const Tensor ae = a.expand({4, 3, 5, 7}).contiguous(), be = b.expand({4, 3, 7, 6}).contiguous();
    const Tensor got = matmul(a.to(kGPU), b.to(kGPU));
    CHECK(got.sizes() == Shape{4, 3, 5, 6});
    check_gemm("batched", got, gemm_f64(ae, be, 12, 5, 7, 6), gemm_f64(ae.abs(), be.abs(), 12, 5, 7, 6), 7);
    // Backward of y = a b: ga = g b^T, gb = a^T g (each a GEMM on transposed views).
    const Tensor x = values(dt, {13, 21}), w = values(dt, {21, 10}), g = values(dt, {13, 10});
    Tensor xg = x.to(kGPU).requires_grad_(true), wg = w.to(kGPU).requires_grad_(true);
    matmul(xg, wg).backward(g.to(kGPU));
    REQUIRE(xg.grad().dtype() == dt);
    const Tensor wt = w.t().contiguous(), xt = x.t().contiguous();
    check_gemm("matmul backward, grad of a", xg.grad(), gemm_f64(g, wt, 1, 13, 10, 21),
               gemm_f64(g.abs(), wt.abs(), 1, 13, 10, 21), 10);
    check_gemm("matmul backward, grad of b", wg.grad(), gemm_f64(xt, g, 1, 21, 13, 10),
               gemm_f64(xt.abs(), g.abs(), 1, 21, 13, 10), 13);
  }
}

TEST_CASE("cuda: bf16 and f16 cross-entropy and conv2d run through f32 as on the CPU; pooling refuses them") {
  SKIP_WITHOUT_GPU();
  manual_seed(6);
  for (DType dt : kHalves) {
    const std::string name = dtype_name(dt);
    CAPTURE(name);
    const Tensor logits = values(dt, {9, 7});
    const Tensor target = Tensor::randint(0, 7, {9});
    // Both devices compute the f32 loss (their own sums' order): one unit apart at most.
    check_ulps("cross_entropy", cross_entropy(logits.to(kGPU), target.to(kGPU)), cross_entropy(logits, target), 1.0);
    Tensor lg = logits.to(kGPU).requires_grad_(true), lc = logits.clone().requires_grad_(true);
    cross_entropy(lg, target.to(kGPU)).backward();
    cross_entropy(lc, target).backward();
    check_ulps("cross_entropy backward", lg.grad(), lc.grad(), 1.0);
    // conv2d, a composite, decomposes on f32 copies on both devices; pooling's prim takes f32 and f64 only.
    const Tensor img = values(dt, {2, 3, 9, 8}), w = values(dt, {4, 3, 3, 3}), bias = values(dt, {4});
    Conv2dOptions o;
    o.padding = {1, 1};
    check_ulps("conv2d", conv2d(img.to(kGPU), w.to(kGPU), bias.to(kGPU), o), conv2d(img, w, bias, o), 1.0);
    CHECK_THROWS_WITH_AS(max_pool2d(img.to(kGPU), 2, 2), doctest::Contains("max_pool2d: expected an f32 or f64 input"),
                         volt::Error);
  }
}

TEST_CASE("cuda: the jit fuses bf16 and f16 chains into one NVRTC kernel that matches the CPU jit bit for bit") {
  SKIP_WITHOUT_GPU();
  manual_seed(7);
  for (DType dt : kHalves) {
    const std::string name = dtype_name(dt);
    CAPTURE(name);
    auto fn = [](const std::vector<Tensor>& a) {
      Tensor h = add(mul(tanh(a[0]), a[1]), 0.75);
      return std::vector<Tensor>{where(gt(h, 0.0), exp(h), neg(h)), convert_element_type(h, DType::f32)};
    };
    auto on_cpu = jit::jit(fn), on_gpu = jit::jit(fn);
    const Tensor a = values(dt, {33, 17}), b = values(dt, {33, 17});
    const std::vector<Tensor> want = on_cpu({a, b});
    const std::vector<Tensor> got = on_gpu({a.to(kGPU), b.to(kGPU)});
    check_bits("first output", got[0], want[0]);
    check_bits("f32 output", got[1], want[1]);
    CHECK(jit::last_kernels(on_gpu).size() == 1);
    CHECK(jit::last_traces(on_gpu).back().str().find("nvrtcFusion0") != std::string::npos);
  }
}

TEST_CASE("cuda: an MLP trained under bf16 autocast on the GPU follows the CPU's bf16 losses") {
  SKIP_WITHOUT_GPU();
  auto make = [] {
    manual_seed(0);
    return std::make_shared<nn::MLP>(40, std::vector<int64_t>{64, 32, 10}, true, 0.1);
  };
  nn::CrossEntropyLoss loss_fn;
  // Eager under an AutocastGuard, then the module jit with its autocast transform.
  for (bool use_jit : {false, true}) {
    CAPTURE(use_jit);
    auto cpu_net = make(), gpu_net = make();
    gpu_net->to(kGPU);
    auto jc = jit::autocast(jit::jit(cpu_net), kBF16), jg = jit::autocast(jit::jit(gpu_net), kBF16);
    nn::Adam oc(cpu_net->parameters(), {.lr = 1e-2}), og(gpu_net->parameters(), {.lr = 1e-2});
    manual_seed(100);
    const Tensor x = Tensor::randn({16, 40});  // one batch, learnt by heart
    const Tensor y = Tensor::randint(0, 10, {16});
    std::vector<float> lc, lg;
    for (int step = 0; step < 12; ++step) {
      const PhiloxState rng = rng_state();
      Tensor loss_c, loss_g;
      {
        AutocastGuard amp(use_jit ? std::nullopt : std::optional<DType>(kBF16));
        const Tensor out_c = use_jit ? jc(x) : (*cpu_net)(x);
        set_rng_state(rng);  // the same dropout masks on both devices
        const Tensor out_g = use_jit ? jg(x.to(kGPU)) : (*gpu_net)(x.to(kGPU));
        REQUIRE(out_g.dtype() == kBF16);
        REQUIRE(out_g.device() == kGPU);
        loss_c = loss_fn(out_c, y);
        loss_g = loss_fn(out_g, y.to(kGPU));
      }
      lc.push_back(loss_c.item<float>());
      lg.push_back(loss_g.item<float>());
      oc.zero_grad();
      og.zero_grad();
      loss_c.backward();
      loss_g.backward();
      oc.step();
      og.step();
    }
    // bf16 activations: the two GEMMs' orders may round a value one unit
    // apart (2^-8 relative), so the first loss agrees to a few of those and
    // the trajectories drift apart slowly as the weights learn.
    double worst = 0;
    for (size_t i = 0; i < lc.size(); ++i) {
      INFO("step " << i << ": CPU " << lc[i] << ", GPU " << lg[i]);
      const double rel = std::fabs(lg[i] - lc[i]) / std::fabs(lc[i]);
      worst = std::max(worst, rel);
      CHECK(rel <= (i == 0 ? 5e-3 : 3e-2));
    }
    MESSAGE(std::string(use_jit ? "jit" : "eager") << ": largest relative loss difference over 12 steps " << worst);
    CHECK(lg.back() < lg.front());  // and it trains
    // The master weights stay f32 on the GPU.
    for (const Tensor& p : gpu_net->parameters()) CHECK(p.dtype() == DType::f32);
  }
}
