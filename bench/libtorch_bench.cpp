// libtorch_bench: the baseline volt_bench compares with.  The same model
// (torchvision's MLP(784, [784, 784, 784, 28, 10], dropout 0.1) layout), the
// same recipe (cross-entropy, Adam lr 1e-3; forward, loss, zero_grad,
// backward, step), the same synthetic batches (std::mt19937 with the seeds
// volt_bench uses) and the same timing rule, on LibTorch's CPU backend.
//
//   libtorch_bench [--model mlp|cnn|gpt] [--batch 8,256] [--steps N] [--threads N] [--no-eval] [--json]
//                  [--amp bf16]      # mlp, gpt: forward and loss under LibTorch's CPU autocast (bf16)
//   libtorch_bench --model gpt --text brown.txt --train-steps 2000 [--eval-every 100]
//
// --model gpt: nanoGPT's GPT at volt's examples/gpt configuration
// (bench/libtorch_gpt.h); --batch sets its batch (default 16).
//
// --model cnn: the Lazy Tensor tutorial's MNIST CNN (volt's nn::MnistCNN, see
// bench/cnn_workload.h) with nll_loss and Adadelta (lr 1.0), training steps only
// (zero_grad, forward, loss, backward, step) on the same numbers as (B, 1, 28, 28).
//
// Threads: Debian's LibTorch starts with one intra-op thread on this kind of
// machine; it is given what volt uses, $OMP_NUM_THREADS or else one per
// core, unless --threads says otherwise.
//
// Built only with -DVOLT_BENCH_LIBTORCH=ON (see bench/README.md); volt_bench
// runs it from its own folder when it is there.
#include <torch/torch.h>

#include "../utils/cli.h"
#include "common.h"
#include "libtorch_gpt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using bench::Clock;
using bench::time_steps;
using bench::Timing;
using bench::us_since;

namespace {

using bench::kBatchesHeld;
using bench::kFeatures;

torch::nn::Sequential make_model() {
  torch::manual_seed(0);
  const std::vector<int64_t> widths = {784, 784, 784, 784, 28, 10};
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    net->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Dropout(0.1));
  }
  return net;
}

struct Batch {
  torch::Tensor x, y;
};

// conv1 -> relu -> conv2 -> relu -> max_pool2d(2) -> dropout1 -> flatten(1)
//   -> fc1 -> relu -> dropout2 -> fc2 -> log_softmax(dim=1)
struct CnnImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 32, 3).stride(1)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(32, 64, 3).stride(1)};
  torch::nn::Dropout dropout1{0.25}, dropout2{0.5};
  torch::nn::Linear fc1{9216, 128}, fc2{128, 10};
  CnnImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("dropout1", dropout1);
    register_module("dropout2", dropout2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv2(torch::relu(conv1(x))));
    x = dropout1(torch::max_pool2d(x, {2, 2})).flatten(1);
    x = dropout2(torch::relu(fc1(x)));
    return torch::log_softmax(fc2(x), 1);
  }
};
TORCH_MODULE(Cnn);

// LibTorch's C++ frontend has no Adadelta; this is torch.optim.Adadelta's
// single-tensor update (rho 0.9, eps 1e-6, no weight decay) in in-place ops.
class Adadelta {
 public:
  Adadelta(std::vector<torch::Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
    for (auto& p : params_) {
      square_avg_.push_back(torch::zeros_like(p));
      acc_delta_.push_back(torch::zeros_like(p));
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.mutable_grad().reset();  // set_to_none
  }
  void step() {
    torch::NoGradGuard guard;
    const double rho = 0.9, eps = 1e-6;
    for (size_t i = 0; i < params_.size(); ++i) {
      const torch::Tensor& g = params_[i].grad();
      if (!g.defined()) continue;
      square_avg_[i].mul_(rho).addcmul_(g, g, 1 - rho);
      torch::Tensor std = square_avg_[i].add(eps).sqrt_();
      torch::Tensor delta = acc_delta_[i].add(eps).sqrt_().div_(std).mul_(g);
      acc_delta_[i].mul_(rho).addcmul_(delta, delta, 1 - rho);
      params_[i].add_(delta, -lr_);
    }
  }

 private:
  std::vector<torch::Tensor> params_, square_avg_, acc_delta_;
  double lr_;
};

std::vector<Batch> synthetic_batches(int64_t batch, bool images) {
  const std::vector<int64_t> shape = images ? std::vector<int64_t>{batch, 1, 28, 28}
                                            : std::vector<int64_t>{batch, kFeatures};
  std::vector<Batch> out;
  for (int k = 0; k < kBatchesHeld; ++k) {
    bench::RawBatch b = bench::synthetic_batch(batch, k);
    out.push_back({torch::from_blob(b.x.data(), shape, torch::kFloat32).clone(),
                   torch::from_blob(b.y.data(), {batch}, torch::kInt64).clone()});
  }
  return out;
}

void print_cell(bool json, const char* phase, int64_t batch, const Timing& t, bool amp = false) {
  const double sps = 1e6 / t.median_us;
  const char* mode = amp ? "libtorch+bf16" : "libtorch";
  if (json)
    std::printf(
        "{\"mode\":\"%s\",\"device\":\"cpu\",\"phase\":\"%s\",\"batch\":%lld,\"steps\":%lld,"
        "\"median_us\":%.2f,\"min_us\":%.2f,\"steps_per_s\":%.2f,\"samples_per_s\":%.1f}\n",
        mode, phase, (long long)batch, (long long)t.steps, t.median_us, t.min_us, sps, sps * batch);
  else
    std::printf("%s cpu %-5s batch %5lld: median %10.1f us, min %10.1f us, %9.1f steps/s, %10.0f samples/s\n",
                mode, phase, (long long)batch, t.median_us, t.min_us, sps, sps * batch);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {8, 64, 256, 1024};
  int64_t steps = 0;
  bool json = false, eval = true, amp = false;
  std::string model = "mlp", text;
  int64_t train_steps = 2000, eval_every = 100;
  bool batch_given = false;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (const char* e = std::getenv("OMP_NUM_THREADS")) threads = std::atoi(e);
  // The same flags as before CLI11, with volt_bench's conventions (volt/utils/cli.h
  // is header-only: it needs CLI11, not the volt library this binary cannot link).
  namespace cli = volt::utils::cli;
  CLI::App app{"LibTorch's side of volt_bench: the same models, recipes, batches and timing rule", "libtorch_bench"};
  cli::setup(app);
  std::string batch_list, amp_type;
  app.add_option("--model", model, "mlp (default), cnn or gpt")->type_name("NAME")->check(cli::one_of({"mlp", "cnn", "gpt"}));
  app.add_option("--batch", batch_list, "batch sizes (default 8,64,256,1024; gpt: its batch, default 16)")
      ->type_name("N,...")->check(cli::each(cli::count(1)));
  app.add_option("--steps", steps, "timed steps per cell (default: until the median is stable)")->check(cli::count(1));
  app.add_option("--threads", threads, "intra-op threads (default: OMP_NUM_THREADS or one per core)")
      ->check(cli::count(1));
  app.add_option("--text", text, "gpt: train on this corpus instead of timing steps")->type_name("FILE");
  app.add_option("--train-steps", train_steps, "gpt with --text: training steps")->capture_default_str()
      ->check(cli::count(1));
  app.add_option("--eval-every", eval_every, "gpt with --text: steps between validation losses")->capture_default_str()
      ->check(cli::count(1));
  app.add_option("--amp", amp_type, "bf16: forward and loss under LibTorch's CPU autocast (mlp, gpt)")
      ->type_name("TYPE")->check(cli::one_of({"bf16"}));
  bool no_eval = false;
  app.add_flag("--json", json, "one JSON object per cell");
  app.add_flag("--no-eval", no_eval, "time training steps only");
  cli::parse(app, argc, argv);
  eval = !no_eval;
  amp = amp_type == "bf16";
  if (app.count("--batch")) {
    batches.clear();
    batch_given = true;
    for (const std::string& b : cli::split_list(batch_list)) batches.push_back(std::stoll(b));
  }
  if (threads > 0) torch::set_num_threads(threads);
  std::fprintf(stderr, "libtorch_bench: LibTorch %s, %d intra-op threads\n", TORCH_VERSION,
               torch::get_num_threads());
  if (model == "gpt") {
    gpt::Config c;
    c.amp_bf16 = amp;
    if (batch_given) c.batch = batches.front();
    try {
      return gpt::run(c, json, steps, text, train_steps, eval_every);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  if (model == "cnn") {
    for (int64_t batch : batches) {
      torch::manual_seed(1);
      Cnn net;
      net->train();
      Adadelta opt(net->parameters(), 1.0);
      auto data = synthetic_batches(batch, true);
      size_t k = 0;
      auto train_step = [&] {
        const Batch& b = data[k++ % data.size()];
        opt.zero_grad();
        auto loss = torch::nll_loss(net->forward(b.x), b.y);
        loss.backward();
        opt.step();
      };
      train_step();
      print_cell(json, "train", batch, time_steps(train_step, steps));
    }
    return 0;
  }
  for (int64_t batch : batches) {
    auto net = make_model();
    net->train();
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
    auto data = synthetic_batches(batch, false);
    size_t k = 0;
    auto train_step = [&] {
      const Batch& b = data[k++ % data.size()];
      torch::Tensor loss;
      {
        gpt::CpuAutocast mixed(amp);  // forward and loss; backward outside, as PyTorch advises
        loss = torch::nn::functional::cross_entropy(net->forward(b.x), b.y);
      }
      opt.zero_grad();
      loss.backward();
      opt.step();
    };
    print_cell(json, "train", batch, time_steps(train_step, steps), amp);
    if (eval) {
      net->eval();
      torch::NoGradGuard guard;
      auto eval_step = [&] {
        const Batch& b = data[k++ % data.size()];
        gpt::CpuAutocast mixed(amp);
        auto logits = net->forward(b.x);
      };
      print_cell(json, "eval", batch, time_steps(eval_step, steps), amp);
    }
  }
  return 0;
}
