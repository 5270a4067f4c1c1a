// Trains torchvision's MLP on MNIST: the seed program (Thunder's "Train a MLP
// on MNIST") in C++, through volt's jit (or eagerly with --eager).
//
//   mnist_mlp                      # 1 epoch, batch 8, Adam lr 1e-3, seed 0, jit
//   mnist_mlp --eager              # the same without the jit
//   mnist_mlp --jit step           # the whole training step compiled (volt::jit::compile_step)
//   mnist_mlp --limit-steps 500    # a quick run
//
// Flow, as in the seed: build MLP(784, [784, 784, 784, 28, 10], dropout=0.1),
// evaluate it untrained, train with Adam and cross-entropy on randomly sampled
// batches, evaluate again.  The model is called through a ModelFn, so a
// compiled (jitted) callable can take the eager module's place without
// changing the loops.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "jit/jit.h"
#include "jit/step.h"

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/optim.h"
#include "tensor/backend.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace volt;
using Clock = std::chrono::steady_clock;
using ModelFn = std::function<Tensor(const Tensor&)>;  // x: (B, 784) -> logits (B, 10)

namespace {

struct Options {
  int64_t epochs = 1;
  int64_t batch_size = 8;
  double lr = 1e-3;
  uint64_t seed = 0;  // torch.manual_seed(0) is the usual choice; the seed itself sets none
  std::string data_dir = data::mnist_root();
  std::string device;  // empty: cuda when available, else cpu
  int64_t limit_steps = -1;  // training steps per epoch; -1 = all
  bool jit = true;
  bool step = false;  // --jit step: compile the whole training step
};

const char* kUsage =
    "usage: mnist_mlp [options]\n"
    "  --epochs N         training epochs (default 1)\n"
    "  --batch-size N     batch size for training and evaluation (default 8)\n"
    "  --lr X             Adam learning rate (default 1e-3)\n"
    "  --seed N           seed of the global generator and of the sampler (default 0)\n"
    "  --data-dir PATH    MNIST files (default $VOLT_DATA_DIR or ~/.cache/volt/mnist)\n"
    "  --device cpu|cuda  (default cuda when available, else cpu)\n"
    "  --jit              run the module through volt::jit (default) and print its traces\n"
    "  --jit step         compile the whole training step (forward, loss, backward, Adam)\n"
    "                     with volt::jit::compile_step and print its trace\n"
    "  --eager            run the module eagerly\n"
    "  --limit-steps N    stop each epoch after N steps, for quick runs\n"
    "  --help             this text\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "mnist_mlp: " << message << "\n" << kUsage;
  std::exit(2);
}

// Accepts "--flag value" and "--flag=value".
Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const bool has_inline = arg.find('=') != std::string::npos;
    if (has_inline) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    auto number = [&](auto parse) {
      std::string v = next();
      try {
        size_t used = 0;
        auto n = parse(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
        return n;
      } catch (const std::exception&) {
        usage_error(arg + ": '" + v + "' is not a number");
      }
    };
    auto to_i64 = [](const std::string& s, size_t* used) { return std::stoll(s, used); };
    auto to_f64 = [](const std::string& s, size_t* used) { return std::stod(s, used); };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--epochs") {
      o.epochs = number(to_i64);
    } else if (arg == "--batch-size") {
      o.batch_size = number(to_i64);
    } else if (arg == "--lr") {
      o.lr = number(to_f64);
    } else if (arg == "--seed") {
      o.seed = static_cast<uint64_t>(number(to_i64));
    } else if (arg == "--data-dir") {
      o.data_dir = next();
    } else if (arg == "--device") {
      o.device = next();
    } else if (arg == "--eager") {
      o.jit = false;
    } else if (arg == "--jit") {
      o.jit = true;
      std::string kind = has_inline ? value : i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 ? argv[++i] : "module";
      if (kind != "module" && kind != "step") usage_error("--jit " + kind + ": use module or step");
      o.step = kind == "step";
    } else if (arg == "--limit-steps") {
      o.limit_steps = number(to_i64);
    } else {
      usage_error("unknown option " + arg);
    }
  }
  if (o.epochs < 0) usage_error("--epochs must be >= 0");
  if (o.batch_size < 1) usage_error("--batch-size must be >= 1");
  if (!(o.lr > 0)) usage_error("--lr must be > 0");
  return o;
}

Device pick_device(const std::string& name) {
  const bool have_cuda = backend_for(DeviceType::CUDA) != nullptr;
  if (name.empty()) return have_cuda ? Device::cuda() : kCPU;
  Device d;
  try {
    d = Device::parse(name);
  } catch (const Error& e) {
    usage_error(std::string("--device: ") + e.what());
  }
  if (d.is_cuda() && !have_cuda)
    usage_error("--device " + name + ": no CUDA backend here (a build without the toolkit, or no GPU and driver on this machine); use cpu");
  if (!d.is_cpu() && !d.is_cuda()) usage_error("--device " + name + ": use cpu or cuda");
  return d;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600),
                  (long long)(s / 60 % 60), (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One line of training progress: rewritten in place on a terminal, else printed
// as a plain line about every 10 % of the epoch (logs stay readable).
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(STDOUT_FILENO)) {}

  void update(int64_t step, double mean_loss) {
    const double elapsed = seconds_since(start_);
    const bool last = step == total_;
    if (tty_) {
      if (!last && elapsed - last_print_ < 0.1) return;
    } else {
      const int64_t every = std::max<int64_t>(1, total_ / 10);
      if (!last && step % every != 0) return;
    }
    last_print_ = elapsed;
    const double rate = step / std::max(elapsed, 1e-9);
    std::printf("%s  step %lld/%lld  loss %.4f  %.1f steps/s  ETA %s%s", tty_ ? "\r" : "",
                (long long)step, (long long)total_, mean_loss, rate,
                format_duration((total_ - step) / rate).c_str(), tty_ && !last ? "   " : "\n");
    std::fflush(stdout);
  }

 private:
  int64_t total_;
  bool tty_;
  Clock::time_point start_ = Clock::now();
  double last_print_ = -1;
};

void evaluate(const ModelFn& model, data::DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto& [x, y] : loader) {
    Tensor guesses = model(x.to(device)).argmax(1);
    correct += static_cast<int64_t>(volt::eq(guesses, y.to(device)).sum().item<double>());
    total += y.size(0);
  }
  std::printf("Correctly guessed %.2f %% of the dataset (%lld of %lld)\n",
              100.0 * correct / std::max<int64_t>(total, 1), (long long)correct, (long long)total);
}

// Returns false when the loss stopped being finite.  With --jit step the loop
// body below is compiled once (volt::jit::compile_step) and `report` gets its trace.
bool train(const ModelFn& model, nn::Module& net, data::DataLoader& loader, const Options& o,
           Device device, std::string* report) {
  nn::CrossEntropyLoss loss_fn;
  nn::Adam optimizer(net.parameters(), {.lr = o.lr});
  auto body = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = loss_fn(model(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss;
  };
  std::unique_ptr<jit::CompiledStep> compiled;
  if (o.step) compiled = std::make_unique<jit::CompiledStep>(jit::compile_step(body, {.state = {net, optimizer}}));
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const int64_t total =
        o.limit_steps >= 0 ? std::min(o.limit_steps, loader.size()) : loader.size();
    std::printf("epoch %lld/%lld: %lld steps of batch %lld\n", (long long)epoch,
                (long long)o.epochs, (long long)total, (long long)o.batch_size);
    Progress progress(total);
    const auto t0 = Clock::now();
    double loss_sum = 0;
    int64_t step = 0;
    for (const auto& [x, y] : loader) {
      if (step == total) break;
      ++step;
      Tensor loss = compiled ? (*compiled)(x.to(device), y.to(device)) : body(x.to(device), y.to(device));
      const double value = loss.item<double>();
      if (!std::isfinite(value)) {
        // On a terminal the progress line is still open: end it first.
        std::printf("%sloss became %f at step %lld of epoch %lld; stopping\n",
                    isatty(STDOUT_FILENO) ? "\n" : "", value, (long long)step, (long long)epoch);
        return false;
      }
      loss_sum += value;
      progress.update(step, loss_sum / step);
    }
    const double seconds = seconds_since(t0);
    std::printf("epoch %lld: %lld steps in %.2f s, %.1f steps/s, mean loss %.4f\n",
                (long long)epoch, (long long)step, seconds, step / std::max(seconds, 1e-9),
                loss_sum / std::max<int64_t>(step, 1));
  }
  if (compiled && report) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "jit: the training step compiled %lld time(s) in %.1f ms, %lld cache hits, arena %.1f MB\n",
                  (long long)compiled->compiles(), compiled->last_compile_ms(), (long long)compiled->cache_hits(),
                  compiled->arena_bytes() / 1e6);
    *report = line + ("\nThis is the trace volt executed for the training step:\n" + compiled->last_trace_str());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const Device device = pick_device(o.device);
  try {
    manual_seed(o.seed);
    // The seed's transform is ToTensor() alone: pixels in [0, 1], no normalisation.
    data::MNIST train_set(o.data_dir, /*train=*/true);
    data::MNIST test_set(o.data_dir, /*train=*/false);
    data::DataLoader train_loader(train_set, o.batch_size, data::RandomSampler(train_set.size(), o.seed));
    // Evaluation visits every sample once; the order does not change the count.
    data::DataLoader test_loader(test_set, o.batch_size, data::SequentialSampler(test_set.size()));

    auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10},
                                         /*bias=*/true, /*dropout=*/0.1);
    net->to(device);
    std::cout << *net << "\n";
    std::printf("device %s, %lld parameters, %lld training samples, %lld test samples\n",
                device.str().c_str(), (long long)net->num_parameters(),
                (long long)train_set.size(), (long long)test_set.size());

    // The callables the loops use; a jit would hand back its own here.
    ModelFn eager_model = [&](const Tensor& x) { return (*net)(x); };
    ModelFn eval_model = eager_model, train_model = eager_model;
    // The jitted callables share the module's parameters: training one trains `net`.
    auto jitted_eval = std::make_shared<jit::JitFunction>(jit::jit(net));
    auto jitted_train = std::make_shared<jit::JitFunction>(jit::jit(net));
    if (o.jit) {
      eval_model = [jitted_eval](const Tensor& x) { return (*jitted_eval)(x); };
      train_model = [jitted_train](const Tensor& x) { return (*jitted_train)(x); };
    }

    net->eval().requires_grad_(false);
    evaluate(eval_model, test_loader, device);

    net->train().requires_grad_(true);
    std::string step_report;
    // The compiled step traces the module itself (the module jit's callable is not traced into it).
    const bool finished = train(o.step ? eager_model : train_model, *net, train_loader, o, device, &step_report);
    net->eval().requires_grad_(false);
    evaluate(eval_model, test_loader, device);
    if (!o.jit) return finished ? 0 : 1;

    std::cout << "The plain module shares the parameters, so it scores the same:\n";
    evaluate(eager_model, test_loader, device);
    if (o.step) {
      std::cout << step_report << "\nThis is the trace volt executed for eval's computation:\n"
                << jit::last_traces(*jitted_eval).back().str();
      return finished ? 0 : 1;
    }
    auto stats = jit::compile_stats(*jitted_train);
    std::printf("jit: training compiled %lld time(s) in %.1f ms (%d fused kernels), %lld cache hits\n",
                (long long)jit::cache_misses(*jitted_train), stats.total_ms, stats.fusions,
                (long long)jit::cache_hits(*jitted_train));
    std::cout << "\nThis is the trace volt executed for training's forward computation:\n"
              << jit::last_traces(*jitted_train).back().str()
              << "\nThis is the trace volt executed for training's backward computation:\n"
              << jit::last_backward_traces(*jitted_train).back().str()
              << "\nThis is the trace volt executed for eval's computation:\n"
              << jit::last_traces(*jitted_eval).back().str();
    return finished ? 0 : 1;
  } catch (const Error& e) {
    std::cerr << "mnist_mlp: " << e.what() << "\n";
    return 1;
  }
}
