// Mixed precision's handling of f32 master weights: the autocast cast cache
// (tensor/autocast.h), Adam writing the bf16 copy in its pass (nn/optim.h),
// the module jit's cached_cast (jit/cached_cast.h), a compiled step's copies
// as state (jit/step/low_weights.h), and weight gradients taken from the bf16 GEMM's f32 sums, eagerly
// (autograd/engine.cpp) and by the jit's rewrite (jit/rewrites/wide_matmul.h).
// References: f64 loops on the bf16-rounded operands, and the plain cast.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "tests/error_of.h"

#include <volt/jit/autocast.h>
#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/linear.h>
#include <volt/nn/loss.h>
#include <volt/nn/serialize.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/functional.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;
using volt::testing::error_of;

namespace {

// x rounded to bf16 as the cast rounds it, as doubles.
std::vector<double> bf16_values(const Tensor& x) { return convert_element_type(x, kBF16).to_vector<double>(); }

// y (m, n) = x (m, k) w (n, k)^T in f64, from the given values.
std::vector<double> linear_f64(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t k,
                               int64_t n) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) y[i * n + j] += x[i * k + l] * w[j * k + l];
  return y;
}

// max |got - want| / max |want|.
double worst(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) err = std::max(err, std::fabs(g[i] - want[i])), scale = std::max(scale, std::fabs(want[i]));
  return err / scale;
}

}  // namespace

TEST_CASE("autocast cache: a parameter's copy is made once per value; in-place writes are seen by the next forward") {
  manual_seed(11);
  clear_autocast_cache();
  const int64_t m = 8, k = 64, n = 16;
  Tensor x = Tensor::randn({m, k});
  Tensor w = Tensor::randn({n, k}).requires_grad_(true);
  REQUIRE(autocast_caches(w));
  CHECK_FALSE(autocast_caches(x));  // not a parameter: cast each time
  {
    AutocastGuard amp(kBF16);
    // Twice the same data, each a cast with its own autograd node.
    const Tensor c1 = autocast_cached_cast(w, kBF16), c2 = autocast_cached_cast(w, kBF16);
    CHECK(c1.raw_data() == c2.raw_data());
    CHECK(c1.requires_grad());
    CHECK(c1.impl()->grad_fn != c2.impl()->grad_fn);
    CHECK(same_bits(c1, convert_element_type(w.detach(), kBF16)));
  }
  Tensor y1;
  {
    AutocastGuard amp(kBF16);
    y1 = linear(x, w);
  }
  CHECK(autocast_cached_copy(w).defined());
  CHECK(worst(y1, linear_f64(bf16_values(x), bf16_values(w.detach()), m, k, n)) < 1.0 / 128);

  // A write in place: the copy is stale, the next forward casts the new value.
  {
    NoGradGuard no_grad;
    w.mul_(-2.0);
  }
  CHECK_FALSE(autocast_cached_copy(w).defined());
  Tensor y2;
  {
    AutocastGuard amp(kBF16);
    y2 = linear(x, w);
  }
  CHECK(worst(y2, linear_f64(bf16_values(x), bf16_values(w.detach()), m, k, n)) < 1.0 / 128);
  CHECK(worst(y2, y1.to_vector<double>()) > 1.0);  // not the old weights' result

  // A write through data_ptr, announced with mark_modified().
  w.data_ptr<float>()[0] = 1000.0f;
  w.mark_modified();
  Tensor y3;
  {
    AutocastGuard amp(kBF16);
    y3 = linear(x, w);
  }
  CHECK(worst(y3, linear_f64(bf16_values(x), bf16_values(w.detach()), m, k, n)) < 1.0 / 128);

  // The gradient through two uses of the cached copy: both reach the f32 leaf.
  {
    AutocastGuard amp(kBF16);
    Tensor loss = add(sum(linear(x, w)), sum(linear(x, w)));
    loss.backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  std::vector<double> want(n * k, 0.0);  // d/dw of 2 sum(x w^T): 2 sum_i x[i]
  const std::vector<double> xr = bf16_values(x);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t i = 0; i < m; ++i) want[j * k + l] += 2 * xr[i * k + l];
  CHECK(worst(w.grad(), want) < 1e-5);

  // The entries go with their parameters.
  const size_t before = autocast_cache_size();
  y1 = y2 = y3 = w = Tensor();  // the graphs held the leaf too
  CHECK(autocast_cache_size() == before - 1);
}

TEST_CASE("autocast: a bf16 product's weight gradient is its f32 sums, never rounded to bf16 (eager)") {
  manual_seed(12);
  const int64_t m = 8, k = 96, n = 24;
  const Tensor x = Tensor::randn({m, k});
  // Gradients that are bf16 values already, as the bf16 output's gradient is.
  const Tensor gy = convert_element_type(Tensor::randn({m, n}), kBF16);
  const std::vector<double> xr = bf16_values(x), g = gy.to_vector<double>();
  Tensor w = Tensor::randn({n, k}).requires_grad_(true), b = Tensor::randn({n}).requires_grad_(true);
  {
    AutocastGuard amp(kBF16);
    Tensor y = linear(x, w, b);
    REQUIRE(y.dtype() == kBF16);
    y.backward(gy);
  }
  // dW[j][l] = sum_i g[i][j] x[i][l]; db[j] = sum_i g[i][j], in f64.
  std::vector<double> dw(n * k, 0.0), db(n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      db[j] += g[i * n + j];
      for (int64_t l = 0; l < k; ++l) dw[j * k + l] += g[i * n + j] * xr[i * k + l];
    }
  CHECK(w.grad().dtype() == DType::f32);
  // f32 sums of 8 exact products: far inside bf16's 2^-9 rounding.
  CHECK(worst(w.grad(), dw) < 1e-6);
  CHECK(worst(b.grad(), db) < 1e-6);

  // matmul: a (m, k) @ W (k, n), W a cast parameter.
  Tensor wm = Tensor::randn({k, n}).requires_grad_(true);
  {
    AutocastGuard amp(kBF16);
    matmul(x, wm).backward(gy);
  }
  std::vector<double> dwm(k * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) dwm[l * n + j] += xr[i * k + l] * g[i * n + j];
  CHECK(worst(wm.grad(), dwm) < 1e-6);
}

TEST_CASE("matmul with out_dtype=f32: bf16 operands on the CPU only, errors name the op") {
  Attrs at;
  at.flag = true;
  const Tensor a = Tensor::randn({3, 4}), b = Tensor::randn({4, 5});
  CHECK(error_of([&] { dispatch1(OpCall{OpId::matmul, {a, b}, at}); }).find("matmul") != std::string::npos);
  const Tensor r = dispatch1(OpCall{OpId::matmul, {convert_element_type(a, kBF16), convert_element_type(b, kBF16)}, at});
  CHECK(r.dtype() == DType::f32);
  CHECK(worst(r, linear_f64(bf16_values(a), bf16_values(b.t().contiguous()), 3, 4, 5)) < 1e-6);
  // Its gradient: the f32 one rounded to the operands' bf16, then matmul's rule.
  const Tensor ab = convert_element_type(a, kBF16).requires_grad_(true);
  const Tensor bb = convert_element_type(b, kBF16).requires_grad_(true);
  const Tensor gy = Tensor::randn({3, 5});
  dispatch1(OpCall{OpId::matmul, {ab, bb}, at}).backward(gy);
  REQUIRE(ab.grad().defined());
  CHECK(ab.grad().dtype() == kBF16);
  // da = g b^T: (3, 5) x (5, 4), as linear_f64 of g and b (4, 5).
  CHECK(worst(ab.grad(), linear_f64(bf16_values(gy), bf16_values(b), 3, 5, 4)) < 1.0 / 128);
}

TEST_CASE("jit: the backward's bf16 weight product and its widening fold into one matmul with an f32 result") {
  manual_seed(13);
  const int64_t m = 8, k = 96, n = 24;
  const Tensor x = Tensor::randn({m, k});
  const Tensor gy = convert_element_type(convert_element_type(Tensor::randn({m, n}), kBF16), DType::f32);
  Tensor w = Tensor::randn({n, k}).requires_grad_(true);
  auto loss = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(mul(convert_element_type(linear(in[0], in[1]), DType::f32), in[2]))};
  };
  auto f = jit::autocast(jit::jit(loss), kBF16);
  f({x, w, gy})[0].backward();
  bool rewritten = false, folded = false;
  for (const jit::Trace& t : jit::last_backward_traces(f)) {
    rewritten |= t.provenance == "Wide bf16 matmul";
    folded |= t.str().find("out_dtype=f32") != std::string::npos;
  }
  CHECK(rewritten);
  CHECK(folded);
  std::vector<double> dw(n * k, 0.0);
  const std::vector<double> xr = bf16_values(x), g = gy.to_vector<double>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) dw[j * k + l] += g[i * n + j] * xr[i * k + l];
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(worst(w.grad(), dw) < 1e-6);
}

TEST_CASE("Adam writes the bf16 copy in its pass: the cast of the new weights, bit for bit; the same training") {
  auto train = [](bool keep_copies) {
    clear_autocast_cache();
    manual_seed(21);
    nn::MLP net(32, {48, 10}, true, 0.1);
    nn::Adam opt(net.parameters(), {.lr = 1e-2});
    manual_seed(22);
    for (int step = 0; step < 4; ++step) {
      const Tensor x = Tensor::randn({8, 32}), y = Tensor::randint(0, 10, {8});
      if (!keep_copies) clear_autocast_cache();  // every forward casts afresh
      AutocastGuard amp(kBF16);
      Tensor loss = nn::functional::cross_entropy(net(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      for (const Tensor& p : net.parameters()) {
        const Tensor c = autocast_cached_copy(p);
        if (!keep_copies) continue;
        REQUIRE(c.defined());  // current after the update: written by Adam
        CHECK(same_bits(c, convert_element_type(p.detach(), kBF16)));
      }
    }
    std::vector<Tensor> ps;
    for (const Tensor& p : net.parameters()) ps.push_back(p.detach().clone());
    return ps;
  };
  const std::vector<Tensor> with = train(true), without = train(false);
  REQUIRE(with.size() == without.size());
  for (size_t i = 0; i < with.size(); ++i) CHECK(same_bits(with[i], without[i]));
  clear_autocast_cache();
}

namespace {

// The ways a weight changes outside the training step, each to be seen by the
// next call: an in-place op, a write through data_ptr announced with
// mark_modified(), and a checkpoint loaded from a file.
void write_weight(int how, nn::Linear& lin, Tensor w) {
  if (how == 0) {
    NoGradGuard no_grad;
    w.mul_(-2.0);
  } else if (how == 1) {
    float* d = w.data_ptr<float>();
    for (int64_t i = 0; i < w.numel(); i += 3) d[i] = 0.5f;
    w.mark_modified();
  } else {
    nn::Linear other(w.size(1), w.size(0));
    const std::string path = "/tmp/volt_test_autocast_weights_" + std::to_string(how) + ".safetensors";
    nn::save(other, path);
    nn::load(lin, path);
  }
}

}  // namespace

TEST_CASE("jit: a parameter's bf16 cast comes from the cast cache, once per value; writes are seen by the next call") {
  for (int how = 0; how < 3; ++how) {
    CAPTURE(how);
    clear_autocast_cache();
    manual_seed(31);
    const int64_t m = 8, k = 64, n = 16;
    auto lin = std::make_shared<nn::Linear>(k, n);
    const Tensor w = lin->weight(), b = lin->bias();
    const Tensor x = Tensor::randn({m, k});
    auto f = jit::autocast(jit::jit(lin), kBF16);
    // y = bf16(x) bf16(w)^T + bf16(b), the sums in f64.
    auto want = [&] {
      std::vector<double> y = linear_f64(bf16_values(x), bf16_values(w.detach()), m, k, n);
      const std::vector<double> bb = bf16_values(b.detach());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] += bb[j];
      return y;
    };
    Tensor y1;
    {
      NoGradGuard no_grad;
      y1 = f({x})[0];
    }
    CHECK(y1.dtype() == DType::bf16);
    CHECK(worst(y1, want()) < 1.0 / 64);
    bool cached = false;
    for (const jit::Trace& t : jit::last_traces(f))
      cached |= t.provenance == "Cached parameter casts" &&
                t.str().find("cached_cast(_weight, dtype=bf16)") != std::string::npos;
    CHECK(cached);
    // The call left the weight's copy in the cache; a second call casts nothing.
    const Tensor c = autocast_cached_copy(w);
    REQUIRE(c.defined());
    CHECK(same_bits(c, convert_element_type(w.detach(), kBF16)));
    const uint64_t v = c.version();
    {
      NoGradGuard no_grad;
      f({x});
    }
    CHECK(autocast_cached_copy(w).raw_data() == c.raw_data());
    CHECK(autocast_cached_copy(w).version() == v);

    write_weight(how, *lin, w);
    Tensor y2;
    {
      NoGradGuard no_grad;
      y2 = f({x})[0];
    }
    CHECK(worst(y2, want()) < 1.0 / 64);
    CHECK(worst(y2, y1.to_vector<double>()) > 0.1);  // not the old weights' result
  }
  clear_autocast_cache();
}

TEST_CASE("jit: with cached casts, training under bf16 gives f32 gradients and Adam's copies are read, not cast") {
  clear_autocast_cache();
  manual_seed(32);
  const int64_t m = 8, k = 48, n = 12;
  auto lin = std::make_shared<nn::Linear>(k, n);
  const Tensor w = lin->weight();
  nn::Adam opt(lin->parameters(), {.lr = 1e-2});
  auto f = jit::autocast(jit::jit(lin), kBF16);
  const Tensor x = Tensor::randn({m, k});
  for (int step = 0; step < 3; ++step) {
    Tensor loss = sum(convert_element_type(f({x})[0], DType::f32));
    opt.zero_grad();
    loss.backward();
    // d sum(y) / dw[j, l] = sum_i bf16(x)[i, l]
    std::vector<double> dw(n * k, 0.0);
    const std::vector<double> xr = bf16_values(x);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        for (int64_t i = 0; i < m; ++i) dw[j * k + l] += xr[i * k + l];
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == DType::f32);
    CHECK(worst(w.grad(), dw) < 1e-6);
    opt.step();
    // Adam wrote the copy with the weight; the next call reads it as it is.
    const Tensor c = autocast_cached_copy(w);
    REQUIRE(c.defined());
    CHECK(same_bits(c, convert_element_type(w.detach(), kBF16)));
    const uint64_t v = c.version();
    {
      NoGradGuard no_grad;
      f({x});
    }
    CHECK(autocast_cached_copy(w).version() == v);
  }
  clear_autocast_cache();
}

TEST_CASE("compile_step under bf16: each weight's copy is state written by the update; writes are seen next step") {
  for (int how = 0; how < 3; ++how) {
    CAPTURE(how);
    clear_autocast_cache();
    manual_seed(33);
    auto lin = std::make_shared<nn::Linear>(40, 10);
    const Tensor w = lin->weight();
    nn::Adam opt(lin->parameters(), {.lr = 1e-2});
    nn::CrossEntropyLoss loss_fn;
    auto body = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = loss_fn((*lin)(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    auto step = jit::compile_step(body, {.state = {*lin, opt}, .autocast = kBF16});
    manual_seed(34);
    const Tensor x = Tensor::randn({8, 40}), y = Tensor::randint(0, 10, {8});
    // The loss the forward gives with the weights as they are now: eager autocast
    // on detached weights, cast afresh (the cache keeps the casts of parameters only).
    auto eager_loss = [&] {
      NoGradGuard no_grad;
      AutocastGuard amp(kBF16);
      return loss_fn(linear(x, lin->weight().detach(), lin->bias().detach()), y).item_double();
    };
    for (int i = 0; i < 3; ++i) {
      const double want = eager_loss();
      CHECK(step(x, y).item_double() == doctest::Approx(want).epsilon(1e-3));
      // The update wrote the weight and its copy: the copy is the weight's cast, bit for bit.
      const Tensor c = autocast_cached_copy(w);
      REQUIRE(c.defined());
      CHECK(same_bits(c, convert_element_type(w.detach(), kBF16)));
    }
    bool lifted = false;
    for (const jit::Trace& t : step.last_traces())
      lifted |= t.provenance == "Low-precision weights" && t.str().find("_weight_bf16") != std::string::npos;
    CHECK(lifted);
    const std::string last = step.last_traces().back().str();
    CHECK(last.find("convert_element_type(_weight, bf16)") == std::string::npos);  // no cast in the forward

    write_weight(how, *lin, w);
    const double want = eager_loss();
    CHECK(step(x, y).item_double() == doctest::Approx(want).epsilon(1e-3));
    CHECK(same_bits(autocast_cached_copy(w), convert_element_type(w.detach(), kBF16)));
  }
  clear_autocast_cache();
}
