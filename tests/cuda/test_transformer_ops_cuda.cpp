// The transformer's tensor ops on the CUDA backend (eager, with autograd, and
// under the jit): outputs and input gradients against the CPU.  Skipped with
// a message where no GPU answers.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cmath>
#include <functional>

#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/cuda/skip_without_gpu.h"
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::check_close;

namespace {
const Device kGPU = Device::cuda(0);
}

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f's output and the gradients of sum(f * w) on `device`, eagerly or jitted.
std::vector<Tensor> run_on(const Fn& f, const std::vector<Tensor>& xs, const Tensor& w, Device device, bool jitted) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : xs) {
    Tensor l = x.detach().clone().to(device);  // a fresh leaf on each run
    if (is_floating(l.dtype())) l.requires_grad_();
    leaves.push_back(l);
  }
  auto jf = jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  Tensor y = jitted ? jf(leaves).at(0) : f(leaves);
  std::vector<Tensor> r{y.detach().to(kCPU)};
  if (!is_floating(y.dtype())) return r;
  sum(mul(y, w.to(device))).backward();
  for (const Tensor& l : leaves)
    if (is_floating(l.dtype())) r.push_back(l.grad().to(kCPU));
  return r;
}

void compare(const std::string& label, const Fn& f, const std::vector<Tensor>& xs) {
  Tensor y = f(xs);
  Tensor w = is_floating(y.dtype()) ? Tensor::randn(y.sizes(), y.dtype()) : Tensor();
  const auto want = run_on(f, xs, w, kCPU, false);
  for (bool jitted : {false, true}) {
    const auto got = run_on(f, xs, w, kGPU, jitted);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      check_close(label + (jitted ? " (jit)" : "") + (i == 0 ? " output" : " gradient " + std::to_string(i - 1)),
                  got[i], want[i], 1e-5, 1e-5);
  }
}

}  // namespace

TEST_CASE("cuda: cat, stack, split, embedding, layer_norm, gelu match the CPU") {
  SKIP_WITHOUT_GPU();
  manual_seed(31);
  Tensor a = Tensor::randn({2, 3, 4}), b = Tensor::randn({2, 2, 4});
  compare("cat", [](const std::vector<Tensor>& x) { return cat({x[0], x[1]}, 1); }, {a, b});
  compare("stack", [](const std::vector<Tensor>& x) { return stack({x[0], x[0] * 3.0}, -1); }, {a});
  compare("split", [](const std::vector<Tensor>& x) {
    auto p = x[0].split({1, 3}, 2);
    return p[0] * p[1];
  }, {a});
  Tensor table = Tensor::randn({6, 4});
  Tensor idx = Tensor::from_vector<int64_t>({5, 0, 5, 2, 3, 3}, {2, 3});
  compare("embedding", [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, {table, idx});
  Tensor w = Tensor::randn({4}), bias = Tensor::randn({4});
  compare("layer_norm", [](const std::vector<Tensor>& x) { return layer_norm(x[0], {4}, x[1], x[2]); }, {a, w, bias});
  compare("gelu", [](const std::vector<Tensor>& x) { return gelu(x[0]); }, {a});
  compare("gelu tanh", [](const std::vector<Tensor>& x) { return gelu(x[0], "tanh"); }, {a});
  compare("erf", [](const std::vector<Tensor>& x) { return erf(x[0]); }, {a});
}

TEST_CASE("cuda: attention's ops (batched matmul of views, tril mask, softmax on a dim) match the CPU") {
  SKIP_WITHOUT_GPU();
  manual_seed(32);
  Tensor x = Tensor::randn({2, 4, 6});
  compare("attention", [](const std::vector<Tensor>& a) {
    auto p = a[0].reshape({2, 4, 2, 3}).permute({0, 2, 1, 3});  // (B, H, T, D)
    Tensor causal = tril(Tensor::ones({4, 4}, DType::b8, a[0].device())) == 0;
    Tensor att = softmax(matmul(p, p.transpose(-2, -1)).masked_fill(causal, -INFINITY), -1);
    return matmul(att, p).permute({0, 2, 1, 3}).reshape({2, 4, 6});
  }, {x});
  Tensor s = Tensor::randn({2, 3, 4});
  compare("softmax dim 0", [](const std::vector<Tensor>& a) { return softmax(a[0], 0); }, {s});
  compare("log_softmax dim 1", [](const std::vector<Tensor>& a) { return log_softmax(a[0], 1); }, {s});
  compare("triu", [](const std::vector<Tensor>& a) { return triu(a[0], 1); }, {s});
  compare("clamp", [](const std::vector<Tensor>& a) { return clamp(a[0], -0.5, 0.5); }, {s});
  compare("max", [](const std::vector<Tensor>& a) { return std::get<0>(max(a[0], 2)); }, {s});
  compare("argmin", [](const std::vector<Tensor>& a) { return std::get<1>(min(a[0], 1, true)); }, {s});
  Tensor g = s.to(kGPU);
  CHECK(allclose(g, s.to(kGPU) + 1e-9));
  CHECK_FALSE(equal(g, g + 1.0));
  CHECK(randperm(5, DType::i64, kGPU).device() == kGPU);
}

TEST_CASE("cuda: embedding with an index out of range is an error naming the op") {
  SKIP_WITHOUT_GPU();
  Tensor w = Tensor::randn({4, 3}).to(kGPU);
  Tensor idx = Tensor::from_vector<int64_t>({1, 7}).to(kGPU);
  CHECK_THROWS_WITH_AS(embedding(w, idx), doctest::Contains("embedding: index out of range"), Error);
  CHECK_THROWS_WITH_AS(cat({w, Tensor::randn({4, 2}, DType::f64).to(kGPU)}, 1),
                       doctest::Contains("cat: expected tensors of one dtype"), Error);
  // The device stays usable.
  CHECK(embedding(w, Tensor::from_vector<int64_t>({3}).to(kGPU)).to(kCPU).sizes() == Shape{1, 3});
}

TEST_CASE("cuda: u8 indices and targets past 255 rows and classes pick the right rows, eager and jitted") {
  // A u8 arange of 300 wrapped: index 5 matched rows 5 and 261 alike.
  SKIP_WITHOUT_GPU();
  manual_seed(34);
  const Tensor w = Tensor::randn({300, 3}), logits = Tensor::randn({3, 300});
  const Tensor idx = Tensor::from_vector<int64_t>({5, 255, 44});
  auto jitted = [](const Fn& f) {
    return jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  };
  const Fn emb = [](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); };
  const Fn ce = [](const std::vector<Tensor>& a) {
    return cross_entropy(a[0], a[1], {.reduction = Reduction::None, .label_smoothing = 0.1});
  };
  const std::vector<Tensor> eg{w.to(kGPU), idx.to(DType::u8).to(kGPU)}, cg{logits.to(kGPU), idx.to(DType::u8).to(kGPU)};
  check_close("embedding", emb(eg).to(kCPU), emb({w, idx}), 1e-5, 2e-3);  // TF32 may round the one-hot product
  check_close("embedding (jit)", jitted(emb)(eg).at(0).to(kCPU), emb({w, idx}), 1e-5, 2e-3);
  check_close("cross_entropy", ce(cg).to(kCPU), ce({logits, idx}), 1e-6, 1e-6);
  check_close("cross_entropy (jit)", jitted(ce)(cg).at(0).to(kCPU), ce({logits, idx}), 1e-6, 1e-6);
}

TEST_CASE("cuda: a compiled step through embedding, layer_norm, causal attention and gelu equals CPU eager") {
  SKIP_WITHOUT_GPU();
  manual_seed(33);
  const std::vector<Tensor> init{Tensor::randn({7, 6}), Tensor::randn({6}), Tensor::randn({6}),
                                 Tensor::randn({6, 6})};
  Tensor idx = Tensor::from_vector<int64_t>({1, 6, 0, 2, 2, 5, 3, 4}, {2, 4});
  auto losses = [&](Device device, bool compiled) {
    std::vector<Tensor> p;
    for (const Tensor& t : init) p.push_back(t.detach().clone().to(device).requires_grad_());
    nn::SGD opt(p, {.lr = 0.1});
    auto body = [&](const Tensor& index) {
      Tensor h = layer_norm(embedding(p[0], index), {6}, p[1], p[2]);  // (2, 4, 6)
      Tensor q = h.reshape({2, 4, 2, 3}).permute({0, 2, 1, 3});
      Tensor causal = tril(Tensor::ones({4, 4}, DType::b8, h.device())) == 0;
      Tensor att = softmax((matmul(q, q.transpose(-2, -1)) * 0.5).masked_fill(causal, -INFINITY), -1);
      Tensor y = gelu(matmul(matmul(att, q).permute({0, 2, 1, 3}).reshape({2, 4, 6}), p[3]));
      Tensor loss = sum(y * y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    std::vector<double> r;
    if (compiled) {
      auto step = jit::compile_step(body, {.state = {p, opt}});
      for (int i = 0; i < 3; ++i) r.push_back(step(idx.to(device)).item<double>());
      if (device.is_cuda()) CHECK(step.ran_as_graph());  // embedding's check runs on the device
    } else {
      for (int i = 0; i < 3; ++i) r.push_back(body(idx.to(device)).item<double>());
    }
    for (const Tensor& t : p)
      for (double v : t.detach().to(kCPU).to_vector<double>()) r.push_back(v);
    return r;
  };
  const auto want = losses(kCPU, false);
  for (bool compiled : {false, true}) {
    const auto got = losses(kGPU, compiled);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO((compiled ? "compiled" : "eager") << " value " << i);
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1e-3));
    }
  }
}

#endif
