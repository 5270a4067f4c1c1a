// The last section of Thunder's "Extending Thunder" notebook, in volt: a
// real-world operator executor (fused_cross_entropy.h, written outside volt)
// claims cross_entropy and runs it as a fused forward that keeps each row's
// log-sum-exp and a fused backward that starts from it.
//
//   extend_cross_entropy                                   # [2048, 50257] on the CPU
//   extend_cross_entropy --rows 64 --classes 1000 --repeats 1
//   extend_cross_entropy --device cuda --rows 64 --classes 1000
//
// It prints the forward trace and the grad trace (the notebook's cells),
// checks the values and gradients against volt's built-in path (the same
// function jitted without the executor) for several options, then times
// forward + backward of both, and of eager mode, in turns in one run: the
// median of --repeats runs each.  Any failed check exits with status 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "fused_cross_entropy.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

int g_failures = 0;

void check(const std::string& label, bool ok, const std::string& detail) {
  std::printf("  check %-44s %s (%s)\n", label.c_str(), ok ? "ok" : "FAILED", detail.c_str());
  if (!ok) ++g_failures;
}

// max |got - want| over max |want|: a difference relative to the tensor's scale.
double relative_difference(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to(kCPU).to_vector<double>(), w = want.to(kCPU).to_vector<double>();
  if (g.size() != w.size()) return INFINITY;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(g[i] - w[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    scale = std::max(scale, std::fabs(w[i]));
  }
  return worst / std::max(scale, 1e-30);
}

void check_close(const std::string& label, const Tensor& got, const Tensor& want, double tol) {
  const double d = relative_difference(got, want);
  char detail[96];
  std::snprintf(detail, sizeof detail, "relative difference %.3g, at most %.0e", d, tol);
  check(label, d <= tol, detail);
}

int count_matches(const std::string& text, const std::regex& re) {
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

void check_trace(const std::string& label, const std::string& trace, const std::string& pattern, int times) {
  const int n = count_matches(trace, std::regex(pattern));
  check(label, n == times, std::to_string(n) + " line(s) match " + pattern);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void banner(const std::string& title) { std::cout << "\n==== " << title << "\n"; }

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, classes = 50257;
  int repeats = 5;
  std::string device_name = "cpu";
  CLI::App app{"An executor written outside volt runs cross_entropy as a fused forward and backward",
               "extend_cross_entropy"};
  volt::utils::cli::setup(app);
  app.add_option("--rows", rows, "rows of the logits (the batch)")->capture_default_str()->check(volt::utils::cli::count(1, 1 << 24));
  app.add_option("--classes", classes, "columns of the logits")->capture_default_str()->check(volt::utils::cli::count(1, 1 << 24));
  app.add_option("--repeats", repeats, "timed runs of each path")->capture_default_str()->check(volt::utils::cli::count(1, 1000));
  app.add_option("--device", device_name, "cpu or cuda")->capture_default_str();
  volt::utils::cli::parse(app, argc, argv);
  try {
    const Device device = Device::parse(device_name);
    manual_seed(0);
    fused_ce::FusedCrossEntropy fused;
    jit::register_executor(fused.executor);

    // As in the notebook: random logits, random labels, ignore_index=-1.
    // Every 16th label is -1 here, so that ignoring is exercised too.
    Tensor logits = Tensor::randn({rows, classes}, DType::f32, device);
    std::vector<int64_t> label_values = Tensor::randint(0, classes, {rows}).to_vector<int64_t>();
    for (size_t i = 0; i < label_values.size(); i += 16) label_values[i] = -1;
    Tensor labels = Tensor::from_vector<int64_t>(label_values).to(device);
    std::printf("logits %s, labels %s, %lld of them ignored (-1)\n", logits.meta_str().c_str(),
                labels.meta_str().c_str(), static_cast<long long>((rows + 15) / 16));

    auto foo_with = [](CrossEntropyOptions o) {
      return [o](const std::vector<Tensor>& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1], o)}; };
    };
    const CrossEntropyOptions notebook{.reduction = Reduction::Mean, .ignore_index = -1, .label_smoothing = 0.0};
    auto cfoo = jit::jit(foo_with(notebook), {.executors = {fused.executor}});
    auto builtin = jit::jit(foo_with(notebook));  // volt's own path: the same function, no executor

    banner("cfoo(logits, labels): the forward operation");
    Tensor loss = cfoo({logits, labels})[0];
    const std::string fwd_trace = jit::last_traces(cfoo).back().str();
    std::cout << "loss " << loss.item<float>() << "\n" << fwd_trace;
    check_trace("one fused forward, its log-sum-exp unused", fwd_trace,
                R"(\(t\d+, _\) = fused_cross_entropy\(t_0, t_1, 'mean', -1, 0\.0\))", 1);
    check_close("loss = built-in loss", loss, builtin({logits, labels})[0], 1e-5);

    banner("grad(cfoo)(logits, labels): the fused forward and backward");
    auto cfoo_grad = jit::grad(cfoo);
    Tensor grad = cfoo_grad({logits, labels})[0];
    const std::string grad_trace = jit::last_traces(cfoo_grad).back().str();
    std::cout << grad_trace;
    check_trace("the forward keeps only the log-sum-exp", grad_trace,
                R"(\(_, t\d+\) = fused_cross_entropy\(t_0, t_1, 'mean', -1, 0\.0\))", 1);
    check_trace("one fused backward from it", grad_trace,
                R"(t\d+ = fused_cross_entropy_backward\(t\d+, t_0, target=t_1, max_log_sum_exp=t\d+, )"
                R"(reduction='mean', ignore_index=-1, label_smoothing=0\.0\))",
                1);
    check_trace("no other op touches the logits", grad_trace, R"(prims\.(exp|amax|log)\()", 0);
    auto builtin_grad = jit::grad(builtin);
    check_close("gradient = built-in gradient", grad, builtin_grad({logits, labels})[0], 1e-5);

    // The other options the checker takes, on the first rows.
    banner("other options, first rows: values and gradients against the built-in path");
    Tensor x = logits.narrow(0, 0, std::min<int64_t>(rows, 64)).contiguous();
    Tensor t = labels.narrow(0, 0, x.sizes()[0]).contiguous();
    for (CrossEntropyOptions o : {CrossEntropyOptions{.reduction = Reduction::Sum, .ignore_index = -1},
                                  CrossEntropyOptions{.reduction = Reduction::None, .ignore_index = 3},
                                  CrossEntropyOptions{.reduction = Reduction::Mean, .label_smoothing = 0.1},
                                  CrossEntropyOptions{.reduction = Reduction::Sum, .ignore_index = -1,
                                                      .label_smoothing = 0.25}}) {
      char name_buf[96];
      std::snprintf(name_buf, sizeof name_buf, "%s, ignore_index %lld, smoothing %g", reduction_name(o.reduction),
                    static_cast<long long>(o.ignore_index), o.label_smoothing);
      const std::string name = name_buf;
      // Where -1 is not ignored, those rows get class 3 (ignored itself in one case).
      Tensor tt = o.ignore_index == -1 ? t : where(eq(t, -1), 3, t);
      auto mine = jit::value_and_grad(jit::jit(foo_with(o), {.executors = {fused.executor}}));
      auto theirs = jit::value_and_grad(jit::jit(foo_with(o)));
      std::vector<Tensor> a = mine({x, tt}), b = theirs({x, tt});
      check(name + ": the executor ran", jit::last_traces(mine).back().str().find("fused_cross_entropy_backward(") !=
                                             std::string::npos, "its backward is in the trace");
      check_close(name + ": loss", a[0], b[0], 1e-5);
      check_close(name + ": gradient", a[1], b[1], 1e-5);
    }
    // What the checker declines runs on volt's own path.
    auto f64 = jit::jit(foo_with(notebook), {.executors = {fused.executor}});
    f64({convert_element_type(x, DType::f64), t});
    check("f64 logits are left to volt", jit::last_traces(f64).back().str().find("fused_") == std::string::npos,
          "no fused op in the trace");

    banner("forward + backward, median of " + std::to_string(repeats) + " runs each, in turns");
    // value_and_grad: the loss and the gradient of the logits, each path.
    auto mine = jit::value_and_grad(cfoo);
    auto theirs = jit::value_and_grad(builtin);
    auto eager = [&] {
      Tensor leaf = logits.detach().requires_grad_(true);
      Tensor l = cross_entropy(leaf, labels, notebook);
      l.backward();
      return std::vector<Tensor>{l, leaf.grad()};
    };
    std::vector<Tensor> e = eager();
    check_close("eager loss = executor loss", e[0], loss, 1e-5);
    check_close("eager gradient = executor gradient", e[1], grad, 1e-5);
    mine({logits, labels});  // compiled outside the timed runs
    theirs({logits, labels});
    auto time_ms = [&](auto&& run) {
      const auto t0 = Clock::now();
      std::vector<Tensor> r = run();
      (void)r.back().to(kCPU).data_ptr<float>();  // waits for the device
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    std::vector<double> t_mine, t_theirs, t_eager;
    for (int i = 0; i < repeats; ++i) {
      t_mine.push_back(time_ms([&] { return mine({logits, labels}); }));
      t_theirs.push_back(time_ms([&] { return theirs({logits, labels}); }));
      t_eager.push_back(time_ms(eager));
    }
    const double m = median(t_mine), th = median(t_theirs), ea = median(t_eager);
    std::printf("  %-52s %10.2f ms\n", "fused_ce executor (jit)", m);
    std::printf("  %-52s %10.2f ms  (%.2fx the executor's time)\n", "volt's built-in path (jit, decomposed and fused)", th,
                th / m);
    std::printf("  %-52s %10.2f ms  (%.2fx the executor's time)\n", "volt's eager fused kernels (autograd)", ea, ea / m);
    std::printf("speed ratio, built-in jit / executor: %.2f; eager / executor: %.2f  [%lld x %lld, %s]\n", th / m,
                ea / m, static_cast<long long>(rows), static_cast<long long>(classes), device.str().c_str());
  } catch (const std::exception& ex) {
    std::cerr << "extend_cross_entropy: " << ex.what() << "\n";
    return 1;
  }
  if (g_failures) {
    std::cerr << "extend_cross_entropy: " << g_failures << " check(s) FAILED\n";
    return 1;
  }
  std::cout << "\nall checks passed\n";
  return 0;
}
