// The MLP the GEMM epilogue tests train (tests/jit/rewrites/test_gemm_epilogue*.cpp):
// 300 -> 200 -> 5 with dropout 0.2 and Adam, eagerly or as a compiled step, on
// the same three batches, so that two runs can be compared loss by loss and
// parameter by parameter.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tensor/reference.h"

namespace volt::testing::epilogue_mlp {

struct Run {
  std::shared_ptr<nn::MLP> net;
  std::unique_ptr<nn::Adam> opt;
  std::vector<double> losses;
};

inline Run make_run(bool bias = true) {
  manual_seed(3);
  Run r;
  r.net = std::make_shared<nn::MLP>(300, std::vector<int64_t>{200, 5}, bias, 0.2);
  r.opt = std::make_unique<nn::Adam>(r.net->parameters(), nn::AdamOptions{.lr = 1e-2});
  return r;
}

inline Tensor eager_step(nn::MLP& net, nn::Adam& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

// `steps` steps of batch `batch`, eagerly (options == nullptr) or compiled
// with `options` (its state set here); the compiled step kept in `keep`.
inline Run train(int64_t batch, int steps, const jit::StepOptions* options,
                 std::unique_ptr<jit::CompiledStep>* keep = nullptr, bool bias = true) {
  Run r = make_run(bias);
  manual_seed(50);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int i = 0; i < 3; ++i) data.emplace_back(Tensor::randn({batch, 300}), Tensor::randint(0, 5, {batch}));
  std::unique_ptr<jit::CompiledStep> step;
  if (options) {
    jit::StepOptions o = *options;
    o.state = {*r.net, *r.opt};
    step = std::make_unique<jit::CompiledStep>(jit::compile_step(
        [net = r.net.get(), opt = r.opt.get()](const Tensor& x, const Tensor& y) { return eager_step(*net, *opt, x, y); },
        std::move(o)));
  }
  manual_seed(77);
  for (int i = 0; i < steps; ++i) {
    const auto& [x, y] = data[static_cast<size_t>(i) % data.size()];
    r.losses.push_back((step ? (*step)(x, y) : eager_step(*r.net, *r.opt, x, y)).item_double());
  }
  if (keep) *keep = std::move(step);
  return r;
}

inline double param_diff(const Run& a, const Run& b) {
  double d = 0;
  auto pa = a.net->parameters(), pb = b.net->parameters();
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, max_abs_diff(pa[i], pb[i]));
  return d;
}

inline double loss_diff(const Run& a, const Run& b) {
  double d = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) d = std::max(d, std::fabs(a.losses[i] - b.losses[i]));
  return d;
}

}  // namespace volt::testing::epilogue_mlp
