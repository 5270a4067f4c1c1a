// lazy_mnist --mlp: the Lazy Tensor tutorial's training loop with the Thunder
// seed model (torchvision's MLP(784, [784, 784, 784, 28, 10], dropout=0.1))
// and Adam.  Every step is recorded as one graph (forward, backward, optimizer
// step) and run by mark_step(); the first step compiles it, the others find it
// in the cache.
//
//   lazy_mnist --mlp                 # 300 steps, batch 8, loss every 50 steps
//   lazy_mnist --mlp --compare       # also eager and jit on the same batches: steps/s of each
//   lazy_mnist --mlp --synthetic     # random data (the default when MNIST is missing)
//
// Real MNIST is read from data::mnist_root() (~/.cache/volt/mnist; ./run.sh fetches it).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/data/dataset.h>
#include <volt/data/sampler.h>
#include "lazy_training.h"
#include <volt/jit/jit.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/random.h>

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int64_t steps = 300;
  int64_t batch_size = 8;
  int64_t log_interval = 50;
  int64_t warmup = 3;  // --compare: steps run before timing (compiles)
  int64_t rounds = 3;  // --compare: rounds per mode, the best one counts
  double lr = 1e-3;
  uint64_t seed = 0;
  bool synthetic = false;
  bool compare = false;
  bool print_graph = false;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"The Thunder MLP trained on volt's lazy device, one mark_step() per step", "lazy_mnist --mlp"};
  volt::utils::cli::setup(app);
  app.add_option("--steps", o.steps, "training steps")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--batch-size", o.batch_size)->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--log-interval", o.log_interval, "print the loss every N steps")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--lr", o.lr, "Adam learning rate")->capture_default_str()->check(volt::utils::cli::positive());
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_flag("--synthetic", o.synthetic, "random images and labels instead of MNIST");
  app.add_flag("--compare", o.compare, "also train eagerly and with volt::jit; print steps/s of each");
  app.add_option("--rounds", o.rounds, "--compare: rounds per mode, the best counts")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_flag("--print-graph", o.print_graph, "print the compiled step graph after fusion");
  volt::utils::cli::parse(app, argc, argv);
  return o;
}

// One batch per step, up to about 64 MB of images (then reused in turn):
// MNIST through the DataLoader, or random.
std::vector<data::Batch> load_batches(const Options& o) {
  const int64_t n = std::min<int64_t>(o.steps, std::max<int64_t>(1, (int64_t{16} << 20) / (o.batch_size * 784)));
  std::vector<data::Batch> batches;
  const std::string root = data::mnist_root();
  const bool have_mnist = std::filesystem::exists(std::filesystem::path(root) / "train-labels-idx1-ubyte") ||
                          std::filesystem::exists(std::filesystem::path(root) / "train-labels-idx1-ubyte.gz");
  if (!o.synthetic && have_mnist) {
    data::MNIST train(root, /*train=*/true);
    data::DataLoader loader(train, o.batch_size, data::RandomSampler(train.size(), o.seed), /*drop_last=*/true);
    for (auto& b : loader) {
      batches.push_back(b);
      if (static_cast<int64_t>(batches.size()) == n) break;
    }
    std::printf("data: MNIST from %s, %lld batches of %lld\n", root.c_str(), (long long)batches.size(),
                (long long)o.batch_size);
  } else {
    manual_seed(o.seed + 1);
    for (int64_t i = 0; i < n; ++i)
      batches.push_back({Tensor::rand({o.batch_size, 784}), Tensor::randint(0, 10, {o.batch_size})});
    std::printf("data: synthetic (%s), %lld batches of %lld\n", have_mnist ? "--synthetic" : "MNIST not found",
                (long long)n, (long long)o.batch_size);
  }
  return batches;
}

std::shared_ptr<nn::MLP> make_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
}

// Eager or jit steps on the CPU over the same batches; seconds for `steps` steps.
double cpu_steps(bool use_jit, const Options& o, const std::vector<data::Batch>& batches, int64_t steps) {
  auto net = make_model(o.seed);
  nn::Adam opt(net->parameters(), {.lr = o.lr});
  nn::CrossEntropyLoss loss_fn;
  jit::JitFunction jm = jit::jit(net);
  auto step = [&](int64_t i) {
    const data::Batch& b = batches[static_cast<size_t>(i) % batches.size()];
    opt.zero_grad();
    Tensor out = use_jit ? jm(b.data) : (*net)(b.data);
    Tensor loss = loss_fn(out, b.target);
    loss.backward();
    opt.step();
  };
  for (int64_t i = 0; i < o.warmup; ++i) step(i);
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step(o.warmup + i);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// argv[0] is the program, the rest its options (--mlp taken out).
int run_mlp_program(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::vector<data::Batch> batches = load_batches(o);
    std::printf("lazy backend: %s\n", lazy::backend().str().c_str());

    // The tutorial's loop: model and optimizer on the lazy device.
    auto net = make_model(o.seed);
    net->to(kLazy);
    nn::Adam opt(net->parameters(), {.lr = o.lr});
    lazy::metrics::reset();
    manual_seed(o.seed);
    double seconds = lazy_example::train_steps(*net, opt, batches, o.steps, [&](int64_t step, const Tensor& loss) {
      // Reading the loss only every log_interval steps keeps an asynchronous
      // backend's steps overlapping; a NaN is caught at the next reading.
      if (step % o.log_interval == 0 || step + 1 == o.steps) {
        const double value = loss.item<double>();
        if (!std::isfinite(value))
          throw Error("the loss became " + std::to_string(value) + " by step " + std::to_string(step) +
                      " (read every " + std::to_string(o.log_interval) + " steps); stopping");
        std::printf("Train step %5lld  [%6lld samples]  Loss: %.6f\n", (long long)step,
                    (long long)(step * o.batch_size), value);
      }
    });
    std::printf("lazy: %lld steps in %.2f s (%.1f steps/s, first step's compile included)\n\n", (long long)o.steps,
                seconds, o.steps / seconds);
    if (o.print_graph && !lazy::last_compiled_traces().empty())
      std::cout << lazy::last_compiled_traces().back().str() << "\n";
    std::cout << "lazy counters:\n" << lazy::metrics::report();

    if (o.compare) {
      // The same batches in every mode, timed after `warmup` steps (compiles).
      // Modes take turns for `rounds` rounds and the best round counts: on a
      // shared machine the slowest rounds measure the neighbours.
      const int64_t n = o.steps;
      auto lazy_net = make_model(o.seed);
      lazy_net->to(kLazy);
      nn::Adam lazy_opt(lazy_net->parameters(), {.lr = o.lr});
      lazy_example::train_steps(*lazy_net, lazy_opt, batches, o.warmup);
      double best[3] = {1e30, 1e30, 1e30}, lazy_record = 0, lazy_key = 0, lazy_run = 0;
      for (int64_t r = 0; r < o.rounds; ++r) {
        best[0] = std::min(best[0], cpu_steps(false, o, batches, n));
        best[1] = std::min(best[1], cpu_steps(true, o, batches, n));
        lazy::metrics::reset();
        const double s = lazy_example::train_steps(*lazy_net, lazy_opt, batches, n);
        if (s < best[2]) {
          best[2] = s;
          const double sync_s = lazy::metrics::counter_value("Time.sync_us") * 1e-6;
          const double exec_s = lazy::metrics::counter_value("Time.execute_us") * 1e-6;
          lazy_record = s - sync_s, lazy_key = sync_s - exec_s, lazy_run = exec_s;
        }
      }
      std::printf("\nbatch %lld, best of %lld rounds of %lld steps (after %lld warm-up steps):\n",
                  (long long)o.batch_size, (long long)o.rounds, (long long)n, (long long)o.warmup);
      std::printf("  eager  %8.1f steps/s\n  jit    %8.1f steps/s\n  lazy   %8.1f steps/s  (%.2fx the jit's time)\n",
                  n / best[0], n / best[1], n / best[2], best[2] / best[1]);
      std::printf("  lazy step: %.3f ms recording ops (forward, backward, optimizer), %.3f ms graph key, cache "
                  "lookup and inputs, %.3f ms running the compiled graph\n",
                  1e3 * lazy_record / n, 1e3 * lazy_key / n, 1e3 * lazy_run / n);
      std::printf("  lazy compiles in the last round: %lld uncached, %lld cached\n",
                  (long long)lazy::metrics::counter_value("UncachedCompile"),
                  (long long)lazy::metrics::counter_value("CachedCompile"));
    }
  } catch (const Error& e) {
    std::cerr << "lazy_mnist: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
