// Trains torchvision's MLP on MNIST: the seed program (Thunder's "Train a MLP
// on MNIST") in C++, through volt's jit (or eagerly with --eager).
//
//   mnist_mlp                      # 1 epoch, batch 8, Adam lr 1e-3, seed 0, jit
//   mnist_mlp --eager              # the same without the jit
//   mnist_mlp --jit step           # the whole training step compiled (volt::jit::compile_step)
//   mnist_mlp --limit-steps 500    # a quick run
//   mnist_mlp --amp bf16           # mixed precision: GEMMs in bf16, loss and Adam in f32 (f16: with loss scaling)
//   mnist_mlp --log-json run.jsonl --plot curves.svg --save ckpt   # what a run leaves behind
//   mnist_mlp --resume ckpt        # goes on from a checkpoint, exactly as if never stopped
//   mpirun -np 2 mnist_mlp --distributed   # data-parallel: each rank a batch, global batch 2 x 8
//
// Flow, as in the seed: build MLP(784, [784, 784, 784, 28, 10], dropout=0.1),
// evaluate it untrained, train with Adam and cross-entropy on randomly sampled
// batches, evaluate again.  The model is called through a ModelFn, so a
// compiled (jitted) callable can take the eager module's place without
// changing the loops.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/jit/autocast.h>
#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>

#include <volt/data/dataloader.h>
#include <volt/data/dataset.h>
#include <volt/data/sampler.h>
#include <volt/nn/checkpoint.h>
#include <volt/nn/amp.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/data/distributed_sampler.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/utils/curves.h>
#include <volt/utils/json_log.h>
#include <volt/utils/progress.h>

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
  int64_t workers = 0;       // DataLoader worker threads
  bool jit = true;
  bool step = false;  // --jit step: compile the whole training step
  bool distributed = false;  // under mpirun: one shard and one batch per rank, gradients averaged
  std::optional<DType> amp;  // --amp: autocast to bf16 or f16
  std::string log_json, plot, save, resume;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "mnist_mlp: " << message << "\n(--help lists the options)\n";
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"Trains torchvision's MLP on MNIST with volt (Thunder's MNIST tutorial in C++)", "mnist_mlp"};
  volt::utils::cli::setup(app);
  app.add_option("--epochs", o.epochs, "training epochs")->capture_default_str()->check(volt::utils::cli::count(0));
  app.add_option("--batch-size", o.batch_size, "batch size for training and evaluation")
      ->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--lr", o.lr, "Adam learning rate")->capture_default_str()->check(volt::utils::cli::positive());
  app.add_option("--seed", o.seed, "seed of the global generator and of the sampler")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "MNIST files ($VOLT_DATA_DIR or ~/.cache/volt/mnist)")
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda (default: cuda when available, else cpu)");
  std::string jit_kind;
  app.add_option("--jit", jit_kind,
                 "module (default): the module through volt::jit, printing its traces; step: the whole "
                 "training step compiled with volt::jit::compile_step")
      ->expected(0, 1)->default_str("module")->check(CLI::IsMember({"module", "step", ""}));
  bool eager = false;
  app.add_flag("--eager", eager, "run the module eagerly");
  app.add_option("--limit-steps", o.limit_steps, "stop each epoch after N steps, for quick runs");
  app.add_option("--workers", o.workers, "threads that make batches ahead of the training loop (DataLoader::workers)")
      ->capture_default_str()->check(volt::utils::cli::count(0, 64));
  app.add_option("--log-json", o.log_json, "write one JSON object per logged step and per epoch to FILE");
  app.add_option("--plot", o.plot, "draw the loss and accuracy curves into FILE.svg");
  app.add_option("--save", o.save, "keep a checkpoint in DIR at the end of every epoch");
  app.add_option("--resume", o.resume, "go on from the checkpoint in DIR");
  std::string amp;
  app.add_option("--amp", amp,
                 "mixed precision (default off): bf16 or f16. The GEMMs run in that type, softmax, the loss and "
                 "Adam in f32 on f32 weights (volt::AutocastGuard, volt::jit::autocast); f16 adds dynamic loss "
                 "scaling (volt::amp::GradScaler)");
  app.add_flag("--distributed", o.distributed,
               "data-parallel training under mpirun: each rank trains on its share of every epoch with "
               "--batch-size, so the global batch is ranks x batch size; rank 0 alone prints, evaluates and saves");
  volt::utils::cli::parse(app, argc, argv);
  o.jit = !eager;
  o.step = o.jit && jit_kind == "step";
  if (eager && app.count("--jit")) usage_error("--eager and --jit exclude each other");
  if (amp == "bf16") o.amp = kBF16;
  else if (amp == "f16") o.amp = kF16;
  else if (app.count("--amp")) usage_error("--amp: expected bf16 or f16, got '" + amp + "'");
  if (o.amp == kF16 && o.step)
    usage_error("--amp f16 needs loss scaling, whose skipped steps a compiled step cannot take; use --amp bf16 "
                "with --jit step");
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

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What a run leaves behind besides its printed lines (--log-json, --plot).
struct Record {
  utils::JsonLog log;
  utils::Curves curves;
};

// Returns the accuracy in %, with a progress line while it runs.
double evaluate(const ModelFn& model, data::DataLoader& loader, Device device, std::optional<DType> amp) {
  NoGradGuard no_grad;
  AutocastGuard mixed(amp);
  utils::Progress progress("eval", loader.size());
  int64_t correct = 0, total = 0, batches = 0;
  for (const auto& [x, y] : loader) {
    Tensor guesses = model(x.to(device)).argmax(1);
    correct += static_cast<int64_t>(volt::eq(guesses, y.to(device)).sum().item<double>());
    total += y.size(0);
    progress.update(++batches);
  }
  const double accuracy = 100.0 * correct / std::max<int64_t>(total, 1);
  std::printf("Correctly guessed %.2f %% of the dataset (%lld of %lld)\n", accuracy, (long long)correct,
              (long long)total);
  return accuracy;
}

// The name of the first parameter holding a NaN or an infinity, or "".
// A sum over all elements, accumulated in f64, is finite exactly when every
// f32 element is, but it is one chain of additions: on the 784 x 784 weights
// it took half of each training step.  The sums of the rows run in parallel
// and propagate any NaN or infinity; only a non-finite result (which a row
// sum past f32's range could also give) is confirmed by the exact sum.
std::string non_finite_parameter(nn::Module& net) {
  for (auto& [name, p] : net.named_parameters()) {
    const Tensor q = p.detach();
    const double quick = (q.dim() >= 2 ? q.sum(-1).sum() : q.sum()).item<double>();
    if (!std::isfinite(quick) && !std::isfinite(q.sum().item<double>())) return name;
  }
  return "";
}

// Returns false when the loss or a parameter stopped being finite.  With --jit step the loop
// body below is compiled once (volt::jit::compile_step) and `report` gets its
// trace.  After each epoch `after_epoch` evaluates; with --save a checkpoint
// is kept, and with --resume the run goes on from one.
bool train(const ModelFn& model, nn::Module& net, data::DataLoader& loader, const Options& o, Device device,
           std::string* report, Record& record, const std::function<double()>& after_epoch) {
  nn::CrossEntropyLoss loss_fn;
  nn::Adam optimizer(net.parameters(), {.lr = o.lr});
  nn::TrainingPosition start;
  if (!o.resume.empty()) {
    start = nn::load_checkpoint(o.resume, net, optimizer);
    std::printf("resumed from %s: epoch %lld, after step %lld\n", o.resume.c_str(), (long long)start.epoch,
                (long long)start.step);
  }
  // f16's narrow range needs the loss scaled (bf16 has f32's exponents).
  amp::GradScaler scaler({.enabled = o.amp == kF16});
  auto body = [&](const Tensor& x, const Tensor& y) {
    AutocastGuard mixed(o.amp);  // the eager loss on the jitted logits too; none without --amp
    Tensor loss = loss_fn(model(x), y);
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(optimizer);  // skipped when a gradient overflowed
    scaler.update();
    return loss;
  };
  std::unique_ptr<jit::CompiledStep> compiled;
  if (o.step)
    compiled = std::make_unique<jit::CompiledStep>(
        jit::compile_step(body, {.state = {net, optimizer}, .autocast = o.amp}));
  auto* sampler = dynamic_cast<data::RandomSampler*>(&loader.sampler());
  auto* shard = dynamic_cast<dist::DistributedSampler*>(&loader.sampler());
  const bool lead = !o.distributed || dist::rank() == 0;
  const int64_t per_epoch = o.limit_steps >= 0 ? std::min(o.limit_steps, loader.size()) : loader.size();
  for (int64_t epoch = start.epoch; epoch <= o.epochs; ++epoch) {
    if (sampler) sampler->set_epoch(epoch - 1);  // epoch e's order, whether resumed or not
    if (shard) shard->set_epoch(epoch - 1);
    const int64_t skip = epoch == start.epoch ? start.step : 0;
    std::printf("epoch %lld/%lld: %lld steps of batch %lld\n", (long long)epoch, (long long)o.epochs,
                (long long)per_epoch, (long long)o.batch_size);
    utils::Progress progress("train", per_epoch - skip);
    const auto t0 = Clock::now();
    double loss_sum = 0;
    int64_t step = 0, trained = 0;
    for (const auto& [x, y] : loader) {
      if (step == per_epoch) break;
      if (step++ < skip) continue;  // trained before the checkpoint
      Tensor loss = compiled ? (*compiled)(x.to(device), y.to(device)) : body(x.to(device), y.to(device));
      const double value = loss.item<double>();
      if (!std::isfinite(value)) {
        std::printf("\nloss became %f at step %lld of epoch %lld; stopping\n", value, (long long)step,
                    (long long)epoch);
        return false;
      }
      // A step can leave a parameter NaN or infinite while its loss (computed
      // before the update) was still finite: stop there, not a step later.
      if (const std::string bad = non_finite_parameter(net); !bad.empty()) {
        std::printf("\nparameter %s became non-finite after step %lld of epoch %lld; stopping\n", bad.c_str(),
                    (long long)step, (long long)epoch);
        return false;
      }
      loss_sum += value;
      ++trained;
      progress.update(trained, loss_sum / trained);
      const double global = double((epoch - 1) * per_epoch + step);
      if (record.log.enabled()) {
        record.log.step(int64_t(global), {{"epoch", epoch}, {"loss", value}, {"mean_loss", loss_sum / trained},
                          {"lr", optimizer.lr()}, {"steps_per_s", trained / std::max(seconds_since(t0), 1e-9)}},
                        /*force=*/step == per_epoch);
      }
      if (step % 10 == 0 || step == per_epoch) record.curves.loss.push_back({global, loss_sum / trained});
    }
    const double seconds = seconds_since(t0);
    std::printf("epoch %lld: %lld steps in %.2f s, %.1f steps/s, mean loss %.4f\n", (long long)epoch,
                (long long)trained, seconds, trained / std::max(seconds, 1e-9),
                loss_sum / std::max<int64_t>(trained, 1));
    const double accuracy = lead ? after_epoch() : 0.0;
    record.curves.accuracy.push_back({double(epoch), accuracy});
    record.log.write("epoch", (epoch - 1) * per_epoch + step, {{"epoch", epoch}, {"accuracy", accuracy}, {"seconds", seconds},
                      {"mean_loss", loss_sum / std::max<int64_t>(trained, 1)}});
    if (!o.save.empty() && lead) {
      nn::save_checkpoint(o.save, net, optimizer, {epoch + 1, 0});
      std::printf("checkpoint: %s (resume with --resume %s)\n", o.save.c_str(), o.save.c_str());
    }
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
  Device device = pick_device(o.device);
  try {
    int rank = 0, ranks = 1;
    if (o.distributed) {
      dist::init();
      rank = dist::rank();
      ranks = dist::world_size();
      // One GPU per rank of a machine (NCCL serves each rank from its own GPU).
      if (device.is_cuda()) device = Device::cuda(dist::local_rank() % cuda::device_count());
      // Rank 0 alone prints (errors still reach stderr from every rank).
      if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) usage_error("cannot silence rank " + std::to_string(rank));
    }
    manual_seed(o.seed);
    // The seed's transform is ToTensor() alone: pixels in [0, 1], no normalisation.
    data::MNIST train_set(o.data_dir, /*train=*/true);
    data::MNIST test_set(o.data_dir, /*train=*/false);
    std::shared_ptr<data::Sampler> train_order =
        o.distributed ? std::shared_ptr<data::Sampler>(std::make_shared<dist::DistributedSampler>(train_set.size(), rank, ranks, o.seed))
                      : std::make_shared<data::RandomSampler>(train_set.size(), o.seed);
    data::DataLoader train_loader(train_set, o.batch_size, train_order);
    // Evaluation visits every sample once; the order does not change the count.
    data::DataLoader test_loader(test_set, o.batch_size, data::SequentialSampler(test_set.size()));
    train_loader.workers(o.workers);
    test_loader.workers(o.workers);

    auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10},
                                         /*bias=*/true, /*dropout=*/0.1);
    net->to(device);
    // Rank 0's initial parameters on every rank; gradients averaged over ranks in backward.
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    if (o.distributed) {
      ddp = std::make_unique<dist::DistributedDataParallel>(*net);
      std::printf("data-parallel: %d ranks x batch %lld = global batch %lld, %zu gradient bucket(s) of <= %lld MiB "
                  "over %s\n",
                  ranks, (long long)o.batch_size, (long long)(ranks * o.batch_size), ddp->buckets().size(),
                  (long long)(dist::DDPOptions{}.bucket_bytes >> 20), dist::backend_name(device).c_str());
    }
    std::cout << *net << "\n";
    if (o.amp) std::printf("mixed precision: autocast to %s%s\n", dtype_name(*o.amp), o.amp == kF16 ? ", dynamic loss scaling" : "");
    std::printf("device %s, %lld parameters, %lld training samples, %lld test samples\n",
                device.str().c_str(), (long long)net->num_parameters(),
                (long long)train_set.size(), (long long)test_set.size());

    // The callables the loops use; a jit would hand back its own here.
    ModelFn eager_model = [&](const Tensor& x) { return (*net)(x); };
    ModelFn eval_model = eager_model, train_model = eager_model;
    // The jitted callables share the module's parameters: training one trains `net`.
    // With --amp, the autocast transform is one of their passes (it prints its trace).
    auto jitted_eval = std::make_shared<jit::JitFunction>(o.amp ? jit::autocast(jit::jit(net), *o.amp) : jit::jit(net));
    auto jitted_train = std::make_shared<jit::JitFunction>(o.amp ? jit::autocast(jit::jit(net), *o.amp) : jit::jit(net));
    if (o.jit) {
      eval_model = [jitted_eval](const Tensor& x) { return (*jitted_eval)(x); };
      train_model = [jitted_train](const Tensor& x) { return (*jitted_train)(x); };
    }

    net->eval().requires_grad_(false);
    if (rank == 0) evaluate(eval_model, test_loader, device, o.amp);

    Record record;
    if (!o.log_json.empty() && rank == 0) record.log = utils::JsonLog(o.log_json, 100);
    // Each epoch ends with an evaluation (the last one is the seed's final one).
    auto after_epoch = [&] {
      net->eval().requires_grad_(false);
      const double accuracy = evaluate(eval_model, test_loader, device, o.amp);
      net->train().requires_grad_(true);
      return accuracy;
    };
    net->train().requires_grad_(true);
    std::string step_report;
    // The compiled step traces the module itself (the module jit's callable is not traced into it).
    const bool finished = train(o.step ? eager_model : train_model, *net, train_loader, o, device, &step_report,
                                record, after_epoch);
    net->eval().requires_grad_(false);
    if (rank != 0) return finished ? 0 : 1;
    if (record.curves.accuracy.empty()) {  // no epoch was left to train (--epochs 0, or resumed at the end)
      std::printf("no training epoch left to run\n");
      evaluate(eval_model, test_loader, device, o.amp);
    }
    if (!o.plot.empty()) {
      utils::write_svg(record.curves, o.plot);
      std::printf("curves: %s\n", o.plot.c_str());
    }
    if (!o.jit) return finished ? 0 : 1;

    std::cout << "The plain module shares the parameters, so it scores the same:\n";
    evaluate(eager_model, test_loader, device, o.amp);
    if (o.step) {
      if (step_report.empty()) return finished ? 0 : 1;
      std::cout << step_report << "\nThis is the trace volt executed for eval's computation:\n"
                << jit::last_traces(*jitted_eval).back().str();
      return finished ? 0 : 1;
    }
    if (jit::cache_misses(*jitted_train) == 0) return finished ? 0 : 1;  // it never ran: no trace to show
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
    // The other ranks would wait for this one in their next all-reduce.
    if (o.distributed && dist::is_initialized()) dist::abort(std::string("mnist_mlp: ") + e.what());
    std::cerr << "mnist_mlp: " << e.what() << "\n";
    return 1;
  }
}
