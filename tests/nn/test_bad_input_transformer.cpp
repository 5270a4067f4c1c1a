// Bad input to the ops a transformer uses (embedding, layer_norm, cat/split,
// masks, attention, cross_entropy, AdamW, sampling): each is a volt::Error that
// names the op in every mode (eager, the module jit, compile_step, the lazy
// device), raised when the program runs, and the lazy device works after it;
// and the narrow index dtypes that used to give silently wrong rows and losses
// give the values of a plain loop.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/gpt.h>
#include <volt/nn/optim.h>
#include <volt/tensor/attention.h>
#include <volt/tensor/ops.h>
#include "tests/error_of.h"
#include "tests/tensor/modes.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::error_of;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the volt::Error that f(xs) raises in each mode ("" for none):
// eagerly, under jit::jit, as a compiled step (a loss of f's output), and on
// the lazy device (where the values are needed and at mark_step).
std::vector<std::pair<std::string, std::string>> errors_in_modes(const Fn& f, const std::vector<Tensor>& xs) {
  std::vector<std::pair<std::string, std::string>> r;
  r.emplace_back("eager", error_of([&] { f(xs); }));
  r.emplace_back("jit", error_of([&] {
                   auto jf = jit::jit([f](const std::vector<Tensor>& a) { return std::vector<Tensor>{f(a)}; });
                   jf(xs);
                 }));
  r.emplace_back("compile_step", error_of([&] {
                   Tensor p = Tensor::ones({1}).requires_grad_();
                   nn::SGD opt({p}, {.lr = 0.1});
                   auto step = jit::compile_step(
                       [&](const std::vector<Tensor>& a) {
                         Tensor loss = add(sum(convert_element_type(f(a), DType::f64)), mul(sum(p), 0.0));
                         opt.zero_grad();
                         loss.backward();
                         opt.step();
                         return std::vector<Tensor>{loss};
                       },
                       {.state = {std::vector<Tensor>{p}, opt}});
                   step(xs);
                 }));
  r.emplace_back("lazy", error_of([&] {
                   std::vector<Tensor> l;
                   for (const Tensor& t : xs) l.push_back(t.to(kLazy));
                   f(l).to(kCPU);
                   lazy::mark_step();
                 }));
  return r;
}

// Every mode raises a volt::Error naming `op` (or `also`, where given) and
// saying `what`; the lazy device still works after it.
void fails_in_every_mode(const Fn& f, const std::vector<Tensor>& xs, const std::string& op, const std::string& what,
                         const std::string& also = "") {
  for (const auto& [mode, message] : errors_in_modes(f, xs)) {
    INFO(mode << ": \"" << message << "\"");
    CHECK((has(message, op + ":") || (!also.empty() && has(message, also + ":"))));
    CHECK(has(message, what));
  }
  Tensor a = Tensor::from_vector<float>({1, 2, 3}).to(kLazy);
  CHECK(add(a, 1.0).to(kCPU).to_vector<float>() == std::vector<float>{2, 3, 4});
  lazy::mark_step();
}

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v); }
Tensor u8(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v).to(DType::u8); }

}  // namespace

TEST_CASE("bad input: embedding with u8 indices into a table of more than 256 rows picks the right rows, every mode") {
  // A u8 arange of 300 rows wrapped: index 5 matched rows 5 and 261 and got their sum.
  manual_seed(1);
  const Tensor w = Tensor::randn({300, 3});
  const std::vector<int64_t> idx{5, 255, 0, 43, 44};
  const std::vector<float> table = w.to_vector<float>();
  const std::vector<float> got = embedding(w, u8(idx)).to_vector<float>();
  REQUIRE(got.size() == idx.size() * 3);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t d = 0; d < 3; ++d) {
      INFO("index " << idx[i] << ", column " << d);
      CHECK(got[i * 3 + d] == table[idx[i] * 3 + d]);
    }
  check_modes([](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); }, {w, u8(idx)});
}

TEST_CASE("bad input: arange into an integer dtype that cannot hold its values names arange") {
  CHECK_THROWS_WITH_AS(Tensor::arange(300, DType::u8), doctest::Contains("arange: [0, 300) in steps of 1 does not fit in u8"),
                       Error);
  CHECK_THROWS_WITH_AS(Tensor::arange(-1, 2, 1, DType::u8), doctest::Contains("arange:"), Error);
  CHECK_THROWS_WITH_AS(Tensor::arange(0, 4e9, 1e9, DType::i32), doctest::Contains("does not fit in i32"), Error);
  CHECK(Tensor::arange(256, DType::u8).to(DType::i64).to_vector<int64_t>().back() == 255);
  CHECK(Tensor::arange(0, 3e9, 1e9, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1000000000, 2000000000});
}

TEST_CASE("bad input: cross_entropy and nll_loss with u8 targets over 300 classes equal a plain loop, every mode") {
  // Each row's loss from a loop in f64: logsumexp - x[t], smoothed: (1 - e)(lse - x[t]) + e/C sum_j (lse - x[j]).
  manual_seed(2);
  const int64_t n = 4, c = 300;
  const Tensor logits = Tensor::randn({n, c}, DType::f64);
  const std::vector<int64_t> t{5, 156, 255, 44};  // 5 + 256 is a class too; 156 is -100 wrapped into u8
  const std::vector<double> x = logits.to_vector<double>();
  for (double e : {0.0, 0.1}) {
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      double m = x[i * c], s = 0, all = 0;
      for (int64_t j = 0; j < c; ++j) m = std::max(m, x[i * c + j]);
      for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - m);
      const double lse = m + std::log(s);
      for (int64_t j = 0; j < c; ++j) all += lse - x[i * c + j];
      want[i] = (1 - e) * (lse - x[i * c + t[i]]) + e / c * all;
    }
    INFO("label_smoothing " << e);
    const Fn rows = [e](const std::vector<Tensor>& a) {
      return cross_entropy(a[0], a[1], {.reduction = Reduction::None, .label_smoothing = e});
    };
    const std::vector<double> got = rows({logits, u8(t)}).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
    check_modes(rows, {logits, u8(t)}, 1e-9);
    check_modes([e](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], {.label_smoothing = e}); },
                {logits, u8(t)}, 1e-9);
  }
  // nll_loss, plain and class-weighted (weight 2 on every class: twice the rows, the same mean).
  const Tensor logp = log_softmax(logits, 1);
  const std::vector<double> plain = nll_loss(logp, u8(t), Tensor(), Reduction::None).to_vector<double>();
  const std::vector<double> weighted =
      nll_loss(logp, u8(t), Tensor::full({c}, 2.0, DType::f64), Reduction::None).to_vector<double>();
  const std::vector<double> lp = logp.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    CHECK(plain[i] == doctest::Approx(-lp[i * c + t[i]]).epsilon(1e-12));
    CHECK(weighted[i] == doctest::Approx(-2 * lp[i * c + t[i]]).epsilon(1e-12));
  }
  check_modes([](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], Tensor(), Reduction::Mean); },
              {logp, u8(t)}, 1e-9);
}

TEST_CASE("bad input: masked_fill and clamp of an integer tensor refuse a value it cannot hold, every mode") {
  const Tensor mask = Tensor::ones({2, 3}, DType::b8);
  fails_in_every_mode([](const std::vector<Tensor>& a) { return masked_fill(a[0], a[1], NAN); },
                      {Tensor::ones({2, 3}, DType::i64), mask}, "masked_fill", "cannot be converted to i64");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return masked_fill(a[0], a[1], 300); },
                      {Tensor::ones({2, 3}, DType::u8), mask}, "masked_fill", "value 300 cannot be converted to u8");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return masked_fill(a[0], a[1], 1e10); },
                      {Tensor::ones({2, 3}, DType::i32), mask}, "masked_fill", "cannot be converted to i32");
  // An integer bound of the tensor's own kind must fit (a floating one promotes instead).
  fails_in_every_mode([](const std::vector<Tensor>& a) { return clamp(a[0], std::nullopt, 300); },
                      {Tensor::ones({2}, DType::u8)}, "clamp", "value 300 cannot be converted to u8");
  // What fits still fills: 255 into u8, -inf into bf16.
  CHECK(masked_fill(Tensor::ones({2}, DType::u8), Tensor::ones({2}, DType::b8), 255).to(DType::i64).to_vector<int64_t>() ==
        std::vector<int64_t>{255, 255});
  CHECK(std::isinf(masked_fill(Tensor::ones({1}, DType::bf16), Tensor::ones({1}, DType::b8), -INFINITY)
                       .to(DType::f32)
                       .item<float>()));
}

TEST_CASE("bad input: split sizes past the dim name split (their sum cannot wrap around)") {
  const int64_t h = int64_t(1) << 62;
  fails_in_every_mode([h](const std::vector<Tensor>& a) { return split(a[0], {h, h, h, h + 3}, 1)[0]; },
                      {Tensor::ones({2, 3})}, "split", "split size 4611686018427387904 is larger than dim 1 of size 3");
}

TEST_CASE("bad input: embedding, layer_norm, cat, masks, attention and cross_entropy name the op in every mode") {
  const Tensor w = Tensor::randn({4, 2});
  fails_in_every_mode([](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); }, {w, i64({0, 4})}, "embedding",
                      "indices must lie in [0, 4)");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); }, {w, i64({-1, 2})}, "embedding",
                      "index out of range");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return embedding(a[0], a[1]); }, {w, Tensor::zeros({2})},
                      "embedding", "expected integer indices");
  const Tensor x = Tensor::randn({2, 3});
  fails_in_every_mode([](const std::vector<Tensor>& a) { return layer_norm(a[0], {3}, a[1]); }, {x, Tensor::ones({4})},
                      "layer_norm", "weight of shape [4] does not match normalized_shape [3]");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return layer_norm(a[0], {2}); }, {x}, "layer_norm",
                      "expected input with shape [*, 2]");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cat({a[0], a[1]}, 0); }, {x, x.to(DType::f64)}, "cat",
                      "one dtype");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cat({a[0], a[0]}, 2); }, {x}, "cat", "out of range");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return stack({a[0], a[0].t()}); }, {x}, "stack",
                      "one shape");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return split(a[0], {1, 1}, 1)[0]; }, {x}, "split",
                      "add up to 2");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return masked_fill(a[0], a[1], 0.0); },
                      {x, Tensor::ones({4, 2, 3}, DType::b8)}, "masked_fill", "does not broadcast");
  // A CPU mask for a lazy input (on the CPU, the jit and a step: one device, no error).
  CHECK(has(error_of([&] { masked_fill(x.to(kLazy), Tensor::ones({2, 3}, DType::b8), 0.0); }),
            "masked_fill: the mask is on cpu but the input on lazy"));
  fails_in_every_mode([](const std::vector<Tensor>& a) { return tril(a[0]); }, {Tensor::ones({3})}, "tril",
                      "at least 2 dims");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return gelu(a[0], "fast"); }, {x}, "gelu",
                      "approximate must be");
  const Tensor q = Tensor::randn({1, 2, 4, 8});
  fails_in_every_mode([](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[1], a[1]); },
                      {q, Tensor::randn({1, 3, 4, 8})}, "scaled_dot_product_attention", "batch and heads");
  fails_in_every_mode(
      [](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[0], a[0], {.dropout_p = NAN}); },
      {q}, "scaled_dot_product_attention", "dropout_p");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[1], a[1]); },
                      {q, Tensor::randn({1, 2, 0, 8})}, "scaled_dot_product_attention", "at least one key position");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[0], a[0]); },
                      {Tensor::randn({1, 2, 4, 0})}, "scaled_dot_product_attention", "head_dim 0 has no default scale");
  const Tensor logits = Tensor::randn({2, 3});
  // Eagerly the fused kernel names cross_entropy; traced and lazy, the check
  // inside its decomposition (its nll_loss) names cross_entropy too.
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1]); }, {logits, i64({0, 3})},
                      "cross_entropy", "must lie in [0, 3)");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], {.label_smoothing = 0.1}); },
                      {logits, i64({-5, 0})}, "cross_entropy", "must lie in [0, 3)");
  for (const auto& [mode, message] :
       errors_in_modes([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1]); }, {logits, i64({0, 3})})) {
    INFO(mode << ": \"" << message << "\"");
    CHECK(!has(message, "nll_loss"));
  }
  // nll_loss called by itself still names nll_loss.
  fails_in_every_mode([](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1]); },
                      {log_softmax(logits, 1), i64({0, 3})}, "nll_loss", "must lie in [0, 3)");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1]); }, {logits, Tensor::zeros({2})},
                      "cross_entropy", "expected an integer target");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], {.label_smoothing = NAN}); },
                      {logits, i64({0, 1})}, "cross_entropy", "label_smoothing");
}

TEST_CASE("bad input: causal attention with L != S is top-left aligned in every mode, as in a plain loop") {
  // is_causal with more keys than queries (and fewer): query i sees keys j <= i.
  manual_seed(3);
  for (auto [l, s] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}}) {
    INFO("L " << l << ", S " << s);
    const Tensor q = Tensor::randn({1, 1, l, 4}, DType::f64), k = Tensor::randn({1, 1, s, 4}, DType::f64),
                 v = Tensor::randn({1, 1, s, 2}, DType::f64);
    const std::vector<double> qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
    const std::vector<double> got = scaled_dot_product_attention(q, k, v, {.causal = true}).to_vector<double>();
    for (int64_t i = 0; i < l; ++i) {
      const int64_t seen = std::min(i + 1, s);
      std::vector<double> sc(seen);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < seen; ++j) {
        for (int64_t d = 0; d < 4; ++d) sc[j] += qv[i * 4 + d] * kv[j * 4 + d] / 2.0;
        m = std::max(m, sc[j]);
      }
      for (int64_t j = 0; j < seen; ++j) z += std::exp(sc[j] - m);
      for (int64_t e = 0; e < 2; ++e) {
        double want = 0;
        for (int64_t j = 0; j < seen; ++j) want += std::exp(sc[j] - m) / z * vv[j * 2 + e];
        CHECK(got[i * 2 + e] == doctest::Approx(want).epsilon(1e-12));
      }
    }
    check_modes(
        [](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[1], a[2], {.causal = true}); },
        {q, k, v}, 1e-9);
  }
}

TEST_CASE("bad input: AdamW refuses an infinite or NaN learning rate or decay, per group too") {
  const Tensor p = Tensor::ones({3}).requires_grad_();
  using Groups = std::vector<nn::ParamGroup>;
  CHECK(has(error_of([&] { nn::AdamW(Groups{{.params = {p}, .lr = INFINITY, .weight_decay = {}}}); }),
            "AdamW: lr must be >= 0 and finite, got inf for group 0"));
  CHECK(has(error_of([&] { nn::AdamW(Groups{{.params = {p}, .lr = NAN, .weight_decay = {}}}); }), "AdamW: lr must be"));
  CHECK(has(error_of([&] { nn::AdamW(Groups{{.params = {p}, .lr = {}, .weight_decay = INFINITY}}); }),
            "AdamW: weight_decay must be >= 0 and finite"));
  CHECK(has(error_of([&] { nn::AdamW({p}, {.lr = INFINITY}); }), "AdamW: lr must be >= 0 and finite"));
  CHECK(has(error_of([&] { nn::AdamW({p}, {.beta2 = 1.0}); }), "AdamW: beta2 must be in [0, 1)"));
  CHECK(has(error_of([&] { nn::AdamW({p}, {.eps = NAN}); }), "AdamW: eps must be >= 0 and finite"));
  CHECK(has(error_of([&] { nn::AdamW({p}).set_group_lr(0, INFINITY); }), "AdamW: lr must be >= 0 and finite"));
  CHECK(has(error_of([&] { nn::AdamW({p}).set_group_lr(1, 0.1); }), "AdamW: group 1 is out of range"));
}

TEST_CASE("bad input: GPT::generate refuses NaN logits instead of sampling a token from them") {
  manual_seed(4);
  nn::GPT gpt({.block_size = 8, .vocab_size = 16, .n_layer = 1, .n_head = 1, .n_embd = 8});
  const Tensor prompt = i64({1, 2}).reshape({1, 2});
  CHECK(gpt.generate(prompt, 3).sizes() == Shape{1, 5});
  {
    NoGradGuard no_grad;
    for (Tensor& p : gpt.parameters()) p.fill_(NAN);
  }
  CHECK_THROWS_WITH_AS(gpt.generate(prompt, 1),
                       doctest::Contains("GPT::generate: the logits divided by the temperature must be finite"), Error);
}

TEST_CASE("bad input: split, chunk, narrow, pad, size, stride and transpose of a 0-dim tensor do not read past its sizes") {
  // wrap_dim lets dim 0 (and -1) through for a 0-dim tensor, which has no size to read: these crashed.
  const Tensor s = Tensor::full({}, 2.0);
  fails_in_every_mode([](const std::vector<Tensor>& a) { return split(a[0], 1, 0)[0]; }, {s}, "split",
                      "at least 1 dim, got a 0-dim tensor");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return split(a[0], std::vector<int64_t>{1}, -1)[0]; }, {s},
                      "split", "at least 1 dim");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return chunk(a[0], 2, 0)[0]; }, {s}, "chunk", "at least 1 dim");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return a[0].narrow(0, 0, 1); }, {s}, "narrow", "at least 1 dim");
  fails_in_every_mode([](const std::vector<Tensor>& a) { return pad(a[0], 0, 1, 1); }, {s}, "pad", "at least 1 dim");
  CHECK(has(error_of([&] { (void)s.size(0); }), "size: a 0-dim tensor has no dim 0"));
  CHECK(has(error_of([&] { (void)s.stride(-1); }), "stride: a 0-dim tensor has no dim -1"));
  const Tensor t = s.transpose(0, -1);  // PyTorch's rule: the tensor itself
  CHECK(t.dim() == 0);
  CHECK(t.item<float>() == 2.0f);
}

TEST_CASE("bad input: layer_norm and causal attention of empty inputs run in compile_step as eagerly (no kernel error)") {
  // compile_step's fused kernels refused an empty input whose strides were not the contiguous ones.
  const Fn norm = [](const std::vector<Tensor>& a) { return layer_norm(a[0], {0}); };
  const Fn attend = [](const std::vector<Tensor>& a) {
    return scaled_dot_product_attention(a[0], a[1], a[1], {.causal = true});
  };
  // As the step's inputs (not its parameters), as errors_in_modes passes them.
  for (const auto& [mode, message] : errors_in_modes(norm, {Tensor::ones({2, 0})})) {
    INFO(mode);
    CHECK(message == "");
  }
  for (const auto& [mode, message] : errors_in_modes(attend, {Tensor::randn({1, 2, 0, 8}), Tensor::randn({1, 2, 6, 8})})) {
    INFO(mode);
    CHECK(message == "");
  }
  check_modes(norm, {Tensor::ones({2, 0})});
  check_modes(attend, {Tensor::randn({1, 2, 0, 8}), Tensor::randn({1, 2, 6, 8})});
}
