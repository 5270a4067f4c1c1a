// A real operator executor: eigen_linear (eigen_linear.h) takes over the
// seed MLP's `linear` calls and runs them with the bias added inside the GEMM.
//
//   extend_linear                      # trace, agreement check, benchmark
//   extend_linear --repeats 7 --steps 40
//
// 1. jit the seed model (MLP(784, [784, 784, 784, 28, 10], dropout 0.1)) with
//    the executor and print the training forward trace: every linear is an
//    eigen_linear call now.
// 2. Train a few steps both ways on the same synthetic batches: the jit with
//    the executor and the jit with the built-in executors, from the same
//    parameters at every step.  Losses and every parameter's gradient must
//    agree within 1e-5 (relative); the program exits with status 1 if not.
// 3. Eval mode with the fused linear + bias + ReLU operator, called from a
//    forward written for it, against the plain model.
// 4. Training steps per second with and without the executor at batch 8 and
//    256, eval forwards per second with linear_relu, and one linear alone:
//    medians of several runs, measured in turns so that both see the same
//    machine load.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "eigen_linear.h"
#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/jit/jit.h>
#include <volt/nn/activation.h>
#include <volt/nn/linear.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<int64_t> kWidths{784, 784, 784, 28, 10};

std::shared_ptr<nn::MLP> seed_model(uint64_t seed) {
  manual_seed(seed);  // the same seed gives the same initial parameters
  return std::make_shared<nn::MLP>(784, kWidths, /*bias=*/true, /*dropout=*/0.1);
}

// The seed model's forward with each Linear -> ReLU pair run as one
// linear_relu call; it shares the model's parameters.  jit() needs only
// forward, named_parameters and is_training.
struct FusedReluForward {
  std::shared_ptr<nn::MLP> mlp;
  jit::Symbol linear_relu;

  Tensor forward(const Tensor& input) {
    Tensor x = input;
    const size_t n = mlp->size();
    for (size_t i = 0; i < n; ++i) {
      auto fc = std::dynamic_pointer_cast<nn::Linear>((*mlp)[i]);
      if (fc && i + 1 < n && std::dynamic_pointer_cast<nn::ReLU>((*mlp)[i + 1])) {
        x = linear_relu(x, fc->weight(), fc->bias())[0];
        ++i;  // the ReLU is done
      } else {
        x = (*(*mlp)[i])(x);
      }
    }
    return x;
  }
  nn::NamedTensors named_parameters() const { return mlp->named_parameters(); }
  bool is_training() const { return mlp->is_training(); }
};

// max |a - b| / max |b|: a relative difference that zeros in b do not blow up.
double rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return worst / std::max(scale, 1e-30);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One training setup: a model, its jitted forward, a loss and Adam.
struct Trainer {
  std::shared_ptr<nn::MLP> net;
  jit::JitFunction fn;
  nn::CrossEntropyLoss loss_fn;
  nn::Adam opt;

  Trainer(std::shared_ptr<nn::MLP> model, jit::JitOptions options)
      : net(model), fn(jit::jit(model, std::move(options))), opt(model->parameters()) {}

  // loss(fn(x), y); leaves the gradients in the parameters' .grad.
  Tensor forward_backward(const Tensor& x, const Tensor& y) {
    Tensor loss = loss_fn(fn(x), y);
    opt.zero_grad();
    loss.backward();
    return loss;
  }
  void step(const Tensor& x, const Tensor& y) {
    forward_backward(x, y);
    opt.step();
  }
};

// Synthetic MNIST-shaped batch: pixels in [0, 1), labels in [0, 10).
std::pair<Tensor, Tensor> batch(int64_t b) { return {Tensor::rand({b, 784}), Tensor::randint(0, 10, {b})}; }

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5, steps = 20;
  CLI::App app{"An executor written outside volt claims linear (+ ReLU) with a blocked Eigen kernel", "extend_linear"};
  volt::utils::cli::setup(app);
  app.add_option("--repeats", repeats, "runs per measurement")->capture_default_str()->check(volt::utils::cli::count(1, 1 << 20));
  app.add_option("--steps", steps, "training steps per run")->capture_default_str()->check(volt::utils::cli::count(1, 1 << 20));
  volt::utils::cli::parse(app, argc, argv);
  int failures = 0;
  try {
    jit::OperatorExecutor& ex = volt_example::eigen_linear_executor();

    // ---- 1. the trace
    Trainer with(seed_model(0), {.executors = {ex}});
    Trainer without(seed_model(0), {});
    manual_seed(1);
    auto [x8, y8] = batch(8);
    with.forward_backward(x8, y8);
    const std::string fwd = jit::last_traces(with.fn).back().str();
    std::cout << "The training forward trace with the eigen_linear executor:\n" << fwd;
    int claimed = 0;
    for (size_t at = fwd.find("= eigen_linear("); at != std::string::npos; at = fwd.find("= eigen_linear(", at + 1))
      ++claimed;
    std::printf("\neigen_linear calls in the forward trace: %d of 5 linear layers\n", claimed);
    if (claimed != 5) ++failures;

    // ---- 2. training agrees with the built-in executors
    // Each step draws its batch and its dropout masks from the same seed in
    // both runs, so the two differ only in who computes the linears.
    std::printf("\nTraining both ways, batch 8 (relative differences; 1e-5 allowed):\n");
    double worst_loss = 0, worst_grad = 0;
    auto params_with = with.net->named_parameters(), params_without = without.net->named_parameters();
    for (int step = 0; step < 5; ++step) {
      manual_seed(100 + step);
      auto [x, y] = batch(8);
      manual_seed(200 + step);
      Tensor loss_with = with.forward_backward(x, y);
      manual_seed(200 + step);
      Tensor loss_without = without.forward_backward(x, y);
      const double dl = rel_diff(loss_with, loss_without);
      double dg = 0;
      std::string worst_name;
      for (size_t i = 0; i < params_with.size(); ++i) {
        double d = rel_diff(params_with[i].second.grad(), params_without[i].second.grad());
        if (d >= dg) dg = d, worst_name = params_with[i].first;
      }
      std::printf("  step %d: loss %.6f vs %.6f (diff %.2e), worst gradient %s (diff %.2e)\n", step,
                  loss_with.item<double>(), loss_without.item<double>(), dl, worst_name.c_str(), dg);
      worst_loss = std::max(worst_loss, dl);
      worst_grad = std::max(worst_grad, dg);
      // Float sums in another order differ in the last bits, and Adam turns
      // such differences in tiny gradients into visible ones within a few
      // steps; so both continue from the same parameters.
      with.opt.step();
      NoGradGuard no_grad;
      for (size_t i = 0; i < params_with.size(); ++i) params_without[i].second.copy_(params_with[i].second);
    }
    const bool agree = worst_loss <= 1e-5 && worst_grad <= 1e-5;
    std::printf("  %s: worst loss difference %.2e, worst gradient difference %.2e\n", agree ? "agree" : "DIFFER",
                worst_loss, worst_grad);
    if (!agree) ++failures;

    // ---- 3. eval with the fused linear + bias + ReLU
    // Nothing can claim a pattern of two ops, so the forward asks for the fused
    // operator itself.  Without gradients it runs whole; under training the
    // grad pass opens it up (ReLU's backward needs its mask, a value inside),
    // and the linear inside is claimed as eigen_linear as usual.
    auto fused = std::make_shared<FusedReluForward>(FusedReluForward{with.net, volt_example::eigen_linear().linear_relu});
    auto jfused = jit::jit(fused, {.executors = {ex}});
    auto jplain = jit::jit(with.net);
    with.net->eval();
    Tensor got, want;
    {
      NoGradGuard no_grad;
      manual_seed(7);
      auto [x, y] = batch(8);
      got = jfused(x);
      want = jplain(x);
    }
    with.net->train();
    const std::string eval_trace = jit::last_traces(jfused).back().str();
    std::cout << "\nThe eval trace of the forward that calls linear_relu:\n" << eval_trace;
    const double d_eval = rel_diff(got, want);
    std::printf("eval logits, linear_relu vs the built-in executors: relative difference %.2e (%s)\n", d_eval,
                d_eval <= 1e-5 ? "ok" : "DIFFER");
    if (d_eval > 1e-5 || eval_trace.find("= linear_relu(") == std::string::npos) ++failures;

    // ---- 4. steps per second
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    std::printf("\nTraining steps/s (forward, backward, Adam), median of %d runs of %d steps.\n"
                "%d OpenMP thread(s) (OMP_NUM_THREADS); on a machine shared with other work\n"
                "single runs vary, and threads that wait for a busy core cost the most.\n",
                repeats, steps, threads);
    for (int64_t b : {8, 256}) {
      Trainer a(seed_model(0), {.executors = {ex}}), c(seed_model(0), {});
      manual_seed(3);
      auto [x, y] = batch(b);
      a.step(x, y), c.step(x, y);  // compile and warm up both
      const int n = b >= 256 ? std::max(2, steps / 4) : steps;
      std::vector<double> rate_ex, rate_builtin;
      for (int r = 0; r < repeats; ++r)
        for (Trainer* t : {&a, &c}) {
          const auto t0 = Clock::now();
          for (int i = 0; i < n; ++i) t->step(x, y);
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          (t == &a ? rate_ex : rate_builtin).push_back(n / s);
        }
      const double e = median(rate_ex), base = median(rate_builtin);
      std::printf("  batch %3lld: eigen_linear %8.1f steps/s, built-in %8.1f steps/s, ratio %.3f\n", (long long)b, e,
                  base, e / base);
    }

    // Eval: the forward that calls linear_relu against the plain model.
    std::printf("\nEval forwards/s (no gradients), median of %d runs:\n", repeats);
    with.net->eval();
    for (int64_t b : {8, 256}) {
      NoGradGuard no_grad;
      manual_seed(4);
      Tensor x = Tensor::rand({b, 784});
      jfused(x), jplain(x);  // compile both
      const int n = b >= 256 ? steps : 10 * steps;
      std::vector<double> rate_fused, rate_plain;
      for (int r = 0; r < repeats; ++r)
        for (jit::JitFunction* f : {&jfused, &jplain}) {
          const auto t0 = Clock::now();
          for (int i = 0; i < n; ++i) (*f)(x);
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          (f == &jfused ? rate_fused : rate_plain).push_back(n / s);
        }
      const double e = median(rate_fused), base = median(rate_plain);
      std::printf("  batch %3lld: linear_relu %8.1f /s, built-in %8.1f /s, ratio %.3f\n", (long long)b, e, base,
                  e / base);
    }
    with.net->train();

    // The kernel alone against the built-in eager linear, on one layer.
    std::printf("\nOne 784 -> 784 linear with bias, forward only, median of %d runs:\n", repeats);
    for (int64_t b : {8, 256}) {
      manual_seed(5);
      Tensor x = Tensor::rand({b, 784}), w = Tensor::randn({784, 784}), bias = Tensor::randn({784});
      const int n = b >= 256 ? 50 : 500;
      std::vector<double> t_ex, t_builtin;
      for (int r = 0; r < repeats; ++r) {
        auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) volt_example::eigen_linear_forward(x, w, bias, false);
        t_ex.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
        t0 = Clock::now();
        for (int i = 0; i < n; ++i) volt::linear(x, w, bias);
        t_builtin.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
      }
      std::printf("  batch %3lld: eigen_linear %8.1f us, built-in %8.1f us, ratio (built-in / eigen_linear) %.3f\n",
                  (long long)b, median(t_ex), median(t_builtin), median(t_builtin) / median(t_ex));
    }
  } catch (const std::exception& e) {
    std::cerr << "extend_linear: " << e.what() << "\n";
    return 1;
  }
  if (failures) {
    std::cerr << "extend_linear: " << failures << " check(s) FAILED\n";
    return 1;
  }
  std::cout << "\nall checks passed\n";
  return 0;
}
