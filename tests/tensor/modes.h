// One op, every way volt runs it: eager (the reference), the jit (forward
// and gradients), compile_step (two SGD steps on the op's floating inputs)
// and the lazy device (forward and gradients).  The loss is sum(f(x) * w) for
// a fixed w, so every output element's gradient is exercised.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

namespace volt::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline bool differentiable(const Tensor& t) { return is_floating(t.dtype()); }

inline std::vector<Tensor> fresh_leaves(const std::vector<Tensor>& xs, Device device = kCPU) {
  std::vector<Tensor> r;
  for (const Tensor& x : xs) {
    Tensor c = x.clone().to(device);
    if (differentiable(c)) c.requires_grad_();
    r.push_back(c);
  }
  return r;
}

// The output and the gradient of every floating input, eagerly.
inline std::vector<Tensor> eager_values(const OpFn& f, const std::vector<Tensor>& xs, const Tensor& w) {
  std::vector<Tensor> leaves = fresh_leaves(xs);
  Tensor y = f(leaves);
  std::vector<Tensor> r{y.detach()};
  if (!differentiable(y)) return r;
  sum(mul(y, w)).backward();
  for (const Tensor& l : leaves)
    if (differentiable(l)) r.push_back(l.grad());
  return r;
}

inline void check_values(const std::string& label, const std::vector<Tensor>& got,
                         const std::vector<Tensor>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(label << (i == 0 ? ": the output" : ": the gradient of input " + std::to_string(i - 1)));
    REQUIRE(got[i].defined());
    CHECK(got[i].sizes() == want[i].sizes());
    CHECK(max_abs_diff(got[i], want[i]) <= tol);
  }
}

inline void check_jit(const OpFn& f, const std::vector<Tensor>& xs, const Tensor& w,
                      const std::vector<Tensor>& want, double tol) {
  auto jf = jit::jit([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  std::vector<Tensor> leaves = fresh_leaves(xs);
  Tensor y = jf(leaves).at(0);
  std::vector<Tensor> got{y.detach()};
  if (differentiable(y)) {
    sum(mul(y, w)).backward();
    for (const Tensor& l : leaves)
      if (differentiable(l)) got.push_back(l.grad());
  }
  check_values("jit", got, want, tol);
  // Without grad: the forward trace alone.
  NoGradGuard ng;
  check_values("jit (no grad)", {jf(xs).at(0)}, {want[0]}, tol);
}

// Two SGD steps (lr 0.1) on the floating inputs, the others passed as arguments.
inline void check_step(const OpFn& f, const std::vector<Tensor>& xs, const Tensor& w, double tol) {
  auto run = [&](bool compiled) {
    std::vector<Tensor> params, args;
    std::vector<Tensor> all = fresh_leaves(xs);
    for (const Tensor& t : all) (differentiable(t) ? params : args).push_back(t);
    nn::SGD opt(params, {.lr = 0.1});
    auto body = [&, all](const std::vector<Tensor>& in) {
      std::vector<Tensor> inputs;
      size_t p = 0, a = 0;
      for (const Tensor& t : all) inputs.push_back(differentiable(t) ? params[p++] : in[a++]);
      Tensor loss = sum(mul(f(inputs), w));
      opt.zero_grad();
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss};
    };
    std::vector<Tensor> losses;
    if (args.empty()) args.push_back(Tensor::zeros({1}));  // a step takes at least one tensor
    if (compiled) {
      auto step = jit::compile_step(body, {.state = {params, opt}});
      for (int i = 0; i < 2; ++i) losses.push_back(step(args).at(0));
    } else {
      for (int i = 0; i < 2; ++i) losses.push_back(body(args).at(0).detach());
    }
    for (const Tensor& p : params) losses.push_back(p.detach());
    return losses;
  };
  check_values("compile_step", run(true), run(false), tol);
}

inline void check_lazy(const OpFn& f, const std::vector<Tensor>& xs, const Tensor& w,
                       const std::vector<Tensor>& want, double tol) {
  std::vector<Tensor> leaves = fresh_leaves(xs, kLazy);
  Tensor y = f(leaves);
  std::vector<Tensor> got{y.detach().to(kCPU)};
  if (differentiable(y)) {
    sum(mul(y, w.to(kLazy))).backward();
    for (const Tensor& l : leaves)
      if (differentiable(l)) got.push_back(l.grad().to(kCPU));
  }
  lazy::mark_step();
  check_values("lazy", got, want, tol);
}

// Eager is the reference for the jit, compile_step and the lazy device.
inline void check_modes(const OpFn& f, const std::vector<Tensor>& xs, double tol = 1e-5) {
  Tensor y = f(xs);
  manual_seed(99);
  Tensor w = differentiable(y) ? Tensor::randn(y.sizes(), y.dtype()) : Tensor();
  std::vector<Tensor> want = eager_values(f, xs, w);
  check_jit(f, xs, w, want, tol);
  if (differentiable(y)) check_step(f, xs, w, tol);
  check_lazy(f, xs, w, want, tol);
}

}  // namespace volt::testing
