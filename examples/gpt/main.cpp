// Trains a byte-level GPT (nanoGPT's layout, 4 layers of width 128) on the
// Brown corpus, in any of volt's modes, and samples from it at the end.
//
//   data/fetch_brown.sh                 # once: writes ~/.cache/volt/brown/brown.txt
//   gpt                                 # 2000 steps, batch 16, block 128, the module jit
//   gpt --eager                         # the same without the jit
//   gpt --jit step                      # the whole training step compiled (volt::jit::compile_step)
//   gpt --device lazy                   # recorded on the lazy device, one graph per step
//   gpt --steps 200 --sample 500 --temperature 0.8 --top-k 40
//   gpt --n-layer 2 --n-embd 64 --block-size 64   # a smaller model (nanoGPT's config names)
//   gpt --amp bf16                      # mixed precision: GEMMs and attention in bf16, the rest in f32
//   gpt --log-json run.jsonl --plot curves.svg --save ckpt   # what a run leaves behind
//   gpt --save ckpt --save-every 500    # a checkpoint every 500 steps and at the end
//   gpt --resume ckpt                   # goes on from it, drawing the batches it would have drawn
//   mpirun -np 2 gpt --distributed      # data-parallel: each rank its own windows, gradients averaged
//
// AdamW (lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on the 2-D weights only),
// 100 warm-up steps then cosine to 1e-4 at the last step, gradients clipped
// at norm 1.0.  The validation loss is the mean over 20 fixed validation batches.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <volt/utils/cli.h>

#include <volt/data/text.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/jit/step/step.h>
#include <volt/nn/adamw.h>
#include <volt/nn/amp.h>
#include <volt/nn/checkpoint.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/gpt.h>
#include <volt/nn/lr_schedule.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/utils/curves.h>
#include <volt/utils/json_log.h>

using namespace volt;
using Clock = std::chrono::steady_clock;
using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;  // idx, targets: (B, T) -> ()

namespace {

struct Options {
  int64_t steps = 2000;
  int64_t batch_size = 16;
  int64_t eval_every = 100;
  int64_t sample = 300;
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string data_dir = data::brown_root();
  std::string device;  // empty: cuda when available, else cpu
  bool jit = true;
  bool step = false;
  bool distributed = false;  // under mpirun: each rank its own windows, gradients averaged
  int64_t save_every = 0;    // 0: a checkpoint at the end only
  std::optional<DType> amp;  // --amp: autocast to bf16 or f16
  std::string log_json, plot, save, resume, prompt = "The ";
  nn::GPTConfig model;  // vocab 256, block 128, 4 layers, 4 heads, width 128, dropout 0
};

constexpr int64_t kValBatches = 20;

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "gpt: " << message << "\n(--help lists the options)\n";
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"Trains a byte-level GPT on the Brown corpus with volt and samples from it", "gpt"};
  volt::utils::cli::setup(app);
  app.add_option("--steps", o.steps, "training steps")->capture_default_str()->check(volt::utils::cli::count(0));
  app.add_option("--batch-size", o.batch_size, "windows per batch")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--eval-every", o.eval_every, "validation loss every N steps")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--sample", o.sample, "bytes to generate at the end")->capture_default_str()->check(volt::utils::cli::count(0));
  app.add_option("--temperature", o.temperature, "sampling temperature")->capture_default_str()->check(volt::utils::cli::positive());
  app.add_option("--top-k", o.top_k, "sample among the k likeliest bytes (0: all)")->capture_default_str();
  app.add_option("--prompt", o.prompt, "what the sample starts from")->capture_default_str();
  app.add_option("--n-layer", o.model.n_layer, "transformer blocks")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--n-head", o.model.n_head, "attention heads (n-embd must be a multiple)")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--n-embd", o.model.n_embd, "the model's width")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--block-size", o.model.block_size, "context length in bytes")->capture_default_str()->check(volt::utils::cli::count(1));
  app.add_option("--seed", o.seed, "seed of the model's init, the batches and the sampler")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "where brown.txt is ($VOLT_DATA_DIR or ~/.cache/volt/brown)")->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda or lazy (default: cuda when available, else cpu)");
  std::string jit_kind;
  app.add_option("--jit", jit_kind, "module (default): the model's loss through volt::jit; step: the whole training step compiled")
      ->expected(0, 1)->default_str("module")->check(CLI::IsMember({"module", "step", ""}));
  bool eager = false;
  app.add_flag("--eager", eager, "run the model eagerly");
  app.add_option("--log-json", o.log_json, "write one JSON object per evaluation to FILE");
  app.add_option("--plot", o.plot, "draw the training and validation loss curves into FILE.svg");
  app.add_option("--save", o.save,
                 "keep a checkpoint in DIR at the end: model.safetensors (nanoGPT's names), the optimizer, the position");
  app.add_option("--save-every", o.save_every, "with --save: a checkpoint every N steps too")->check(volt::utils::cli::count(1));
  app.add_option("--resume", o.resume, "go on from the checkpoint in DIR (the same flags as the run that saved it)");
  std::string amp;
  app.add_option("--amp", amp,
                 "mixed precision (default off): bf16 or f16. Linear layers and attention run in that type, "
                 "LayerNorm, softmax, the loss and AdamW in f32 on f32 weights (volt::AutocastGuard); f16 adds "
                 "dynamic loss scaling (volt::amp::GradScaler)");
  app.add_flag("--distributed", o.distributed,
               "data-parallel under mpirun: each rank trains on its own windows, gradients averaged over ranks");
  volt::utils::cli::parse(app, argc, argv);
  if (eager && app.count("--jit")) usage_error("--eager and --jit exclude each other");
  if (o.prompt.empty()) usage_error("--prompt must not be empty");
  if (o.save_every > 0 && o.save.empty()) usage_error("--save-every needs --save DIR");
  if (amp == "bf16") o.amp = kBF16;
  else if (amp == "f16") o.amp = kF16;
  else if (app.count("--amp")) usage_error("--amp: expected bf16 or f16, got '" + amp + "'");
  if (o.amp == kF16 && jit_kind == "step" && !eager)
    usage_error("--amp f16 needs loss scaling, whose skipped steps a compiled step cannot take; use --amp bf16 "
                "with --jit step");
  o.jit = !eager;
  o.step = o.jit && jit_kind == "step";
  return o;
}

Device pick_device(const Options& o) {
  const bool have_cuda = backend_for(DeviceType::CUDA) != nullptr;
  if (o.device.empty()) return have_cuda ? Device::cuda() : kCPU;
  Device d;
  try {
    d = Device::parse(o.device);
  } catch (const Error& e) {
    usage_error(std::string("--device: ") + e.what());
  }
  if (d.is_cuda() && !have_cuda) usage_error("--device " + o.device + ": no CUDA backend here; use cpu");
  if (d == kLazy && o.step) usage_error("--device lazy records every step already; use it without --jit step");
  if (d == kLazy && o.distributed) usage_error("--distributed runs on cpu or cuda, not on the lazy device");
  return d;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

jit::JitOptions named(const std::string& name) {
  jit::JitOptions options;
  options.name = name;
  return options;
}

// The GPT's loss as a jitted function of (idx, targets) that shares its parameters.
std::shared_ptr<jit::JitFunction> jit_loss(const std::shared_ptr<nn::GPT>& gpt) {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [n, p] : gpt->named_parameters()) {
    params.push_back(p);
    names.push_back(jit::proxy_name_for(n));
  }
  return std::make_shared<jit::JitFunction>(
      [gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
      std::vector<std::string>{"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); },
      named("GPT"));
}

// The mean loss over the fixed validation batches, in eval mode without gradients.
double val_loss(nn::GPT& gpt, const LossFn& loss_of, const std::vector<data::TextBatch>& val, Device device,
                std::optional<DType> amp) {
  NoGradGuard no_grad;
  AutocastGuard mixed(amp);
  gpt.eval();
  double total = 0;
  for (const auto& b : val) {
    Tensor loss = loss_of(b.inputs.to(device), b.targets.to(device));
    if (device == kLazy) lazy::mark_step();
    total += loss.item<double>();
  }
  gpt.train();
  return total / static_cast<double>(val.size());
}

// The first block's forward, jitted on its own: attention as prims, what fused.
void print_block_trace(nn::GPT& gpt, Device device, std::optional<DType> amp) {
  NoGradGuard no_grad;
  AutocastGuard mixed(amp);  // the jit takes the guard's type: the trace shows the casts
  gpt.eval();
  auto block = gpt.blocks()->at<nn::Block>(0);
  jit::JitFunction jitted = jit::jit(block);
  const auto& c = gpt.config();
  jitted(Tensor::randn({1, c.block_size, c.n_embd}).to(device));
  std::cout << "\nThis is the trace volt executed for a transformer block's forward (attention as prims):\n"
            << jit::last_traces(jitted).back().str();
  gpt.train();
}

struct Trainer {
  const Options& o;
  nn::GPT& gpt;
  Device device;
  LossFn loss_of;  // the model: eager or jitted
  nn::AdamW opt;
  nn::WarmupCosineLR schedule;
  amp::GradScaler scaler;  // enabled for --amp f16 only
  std::unique_ptr<jit::CompiledStep> compiled;
  int64_t start = 0;  // steps taken before this run (--resume)
  bool lead = true;   // the rank that evaluates, prints and saves

  Trainer(const Options& options, nn::GPT& model, Device d, LossFn loss, bool lead_rank)
      : o(options), gpt(model), device(d), loss_of(std::move(loss)),
        opt(nn::weight_decay_groups(model.parameters(), 0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95}),
        schedule({.max_lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .decay_steps = std::max<int64_t>(options.steps, 101)}),
        scaler({.enabled = options.amp == kF16}), lead(lead_rank) {
    if (!o.resume.empty()) {  // before the step is compiled, so it starts from the loaded state
      start = nn::load_checkpoint(o.resume, gpt, opt).step;
      std::printf("resumed from %s: after step %lld\n", o.resume.c_str(), (long long)start);
    }
    if (o.step)
      compiled = std::make_unique<jit::CompiledStep>(jit::compile_step(
          [this](const Tensor& x, const Tensor& y) { return body(x, y); }, {.state = {gpt, opt}, .autocast = o.amp}));
  }

  Tensor body(const Tensor& x, const Tensor& y) {
    // The jitted loss takes the guard's type too (it is part of its cache key).
    AutocastGuard mixed(o.amp);
    Tensor loss = loss_of(x, y);
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale(opt);  // the norm is the true gradients' (a no-op unless f16)
    nn::utils::clip_grad_norm_(gpt.parameters(), 1.0);
    scaler.step(opt);  // skipped when a gradient overflowed
    scaler.update();
    return loss;
  }

  Tensor step(int64_t i, const data::TextBatch& b) {
    opt.set_lr(schedule(i));
    Tensor x = b.inputs.to(device), y = b.targets.to(device);
    Tensor loss = compiled ? (*compiled)(x, y) : body(x, y);
    if (device == kLazy) lazy::mark_step();
    return loss;
  }

  // A checkpoint after `steps` steps (the lead rank's: every rank holds the same state).
  void save(int64_t steps) {
    if (!lead) return;
    nn::save_checkpoint(o.save, gpt, opt, {.epoch = 1, .step = steps});
    std::printf("checkpoint after step %lld: %s (resume with --resume %s)\n", (long long)steps, o.save.c_str(),
                o.save.c_str());
  }
};

// Trains o.steps steps; returns false when the loss stopped being finite.
bool train(Trainer& t, data::TextWindows& train_set, const std::vector<data::TextBatch>& val, const LossFn& eval_loss,
           utils::JsonLog& log, utils::Curves& curves) {
  const Options& o = t.o;
  // Every rank's batch: the tokens of one step of the whole run.
  const double tokens_per_step = double(o.batch_size * t.gpt.config().block_size * (o.distributed ? dist::world_size() : 1));
  train_set.skip(t.start, o.batch_size);  // the batches the steps before the checkpoint drew
  double v = t.lead ? val_loss(t.gpt, eval_loss, val, t.device, o.amp) : 0.0;
  std::printf("step %lld: val loss %.4f\n", (long long)t.start, v);
  log.write("eval", t.start, {{"val_loss", v}});
  curves.accuracy.push_back({double(t.start), v});
  auto t0 = Clock::now();
  int64_t since = 0;
  double train_seconds = 0;
  for (int64_t i = t.start + 1; i <= o.steps; ++i) {
    Tensor loss = t.step(i - 1, train_set.batch(o.batch_size));
    ++since;
    const bool checkpoint = !o.save.empty() && ((o.save_every > 0 && i % o.save_every == 0) || i == o.steps);
    if (i % o.eval_every != 0 && i != o.steps) {
      if (checkpoint) t.save(i);
      continue;
    }
    const double train_loss = loss.item<double>();  // waits for the step
    const double seconds = seconds_since(t0);
    train_seconds += seconds;
    if (!std::isfinite(train_loss)) {
      std::printf("loss became %f at step %lld; stopping\n", train_loss, (long long)i);
      return false;
    }
    if (t.lead) v = val_loss(t.gpt, eval_loss, val, t.device, o.amp);
    const double rate = since * tokens_per_step / std::max(seconds, 1e-9);
    std::printf("step %lld: train loss %.4f, val loss %.4f, lr %.2e, %.0f tokens/s\n", (long long)i, train_loss, v,
                t.opt.lr(), rate);
    std::fflush(stdout);
    log.write("step", i, {{"loss", train_loss}, {"val_loss", v}, {"lr", t.opt.lr()}, {"tokens_per_s", rate}});
    curves.loss.push_back({double(i), train_loss});
    curves.accuracy.push_back({double(i), v});
    if (checkpoint) t.save(i);
    since = 0;
    t0 = Clock::now();
  }
  const int64_t trained = std::max<int64_t>(o.steps - t.start, 0);
  if (trained > 0)
    std::printf("trained %lld steps in %.1f s: %.0f tokens/s\n", (long long)trained, train_seconds,
                trained * tokens_per_step / std::max(train_seconds, 1e-9));
  else if (!o.save.empty())
    t.save(t.start);  // nothing left to train: the checkpoint as loaded
  return true;
}

void sample(nn::GPT& gpt, const Options& o, Device device) {
  if (o.sample == 0) return;
  gpt.eval();
  if (device == kLazy) gpt.to(kCPU);  // a token at a time: eager runs it without a graph per length
  Tensor prompt = data::ByteTokenizer::encode(o.prompt);
  prompt = prompt.reshape({1, prompt.numel()}).to(device == kLazy ? kCPU : device);
  Tensor out = gpt.generate(prompt, o.sample, {.temperature = o.temperature, .top_k = o.top_k, .seed = o.seed});
  std::cout << "\nA sample (temperature " << o.temperature << ", top-k " << o.top_k << "):\n"
            << data::ByteTokenizer::decode(out[0]) << "\n";
}

}  // namespace

// Under --distributed: whether every rank ends with the same parameters (DDP's promise), by their sums.
bool same_on_every_rank(nn::GPT& gpt) {
  std::vector<double> sums;
  for (const Tensor& p : gpt.parameters()) sums.push_back(p.to(kCPU).to(DType::f64).sum().item<double>());
  const int64_t n = static_cast<int64_t>(sums.size());
  std::vector<double> all = dist::all_gather(Tensor::from_vector(sums, {n})).to_vector<double>();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] != sums[i % sums.size()]) return false;
  return true;
}

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  Device device = pick_device(o);
  try {
    int rank = 0;
    if (o.distributed) {
      dist::init();
      rank = dist::rank();
      if (device.is_cuda()) device = Device::cuda(dist::local_rank() % cuda::device_count());
      // Rank 0 alone prints (errors still reach stderr from every rank).
      if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) usage_error("cannot silence rank " + std::to_string(rank));
    }
    const std::string path = o.data_dir + "/brown.txt";
    if (!std::filesystem::exists(path)) {
      std::cerr << "gpt: " << path << " not found: run `data/fetch_brown.sh " << o.data_dir
                << "` to fetch it there (or pass --data-dir DIR)\n";
      return 1;
    }
    const nn::GPTConfig config = o.model;
    const std::string text = data::load_text(path, config.block_size);
    // Each rank draws its own windows (rank 0 those of a run without --distributed).
    data::TextWindows train_set(text, config.block_size, data::Split::train, o.seed + 1000003ull * uint64_t(rank), path);
    data::TextWindows val_set(text, config.block_size, data::Split::val, o.seed + 1000, path);
    std::vector<data::TextBatch> val;
    for (int64_t i = 0; i < kValBatches; ++i) val.push_back(val_set.batch(o.batch_size));

    manual_seed(o.seed);
    auto gpt = std::make_shared<nn::GPT>(config);
    gpt->to(device);
    // Rank 0's initial parameters on every rank; gradients averaged over ranks in backward.
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    if (o.distributed) {
      ddp = std::make_unique<dist::DistributedDataParallel>(*gpt);
      std::printf("data-parallel: %d ranks x batch %lld = global batch %lld, %zu gradient bucket(s) over %s\n",
                  dist::world_size(), (long long)o.batch_size, (long long)(dist::world_size() * o.batch_size),
                  ddp->buckets().size(), dist::backend_name(device).c_str());
    }
    std::cout << *gpt << "\n";
    if (o.amp) std::printf("mixed precision: autocast to %s%s\n", dtype_name(*o.amp), o.amp == kF16 ? ", dynamic loss scaling" : "");
    std::printf("device %s, mode %s, %lld parameters (%.2f M), %lld training bytes, %lld validation bytes\n",
                device.str().c_str(), o.step ? "compiled step" : o.jit ? "module jit" : "eager",
                (long long)gpt->num_parameters(), gpt->num_parameters() / 1e6, (long long)train_set.size(),
                (long long)val_set.size());

    LossFn eager_loss = [gpt](const Tensor& x, const Tensor& y) { return gpt->forward(x, y).loss; };
    LossFn loss_of = eager_loss;
    auto jitted = jit_loss(gpt);
    if (o.jit && device != kLazy) loss_of = [jitted](const Tensor& x, const Tensor& y) { return (*jitted)({x, y}).at(0); };
    if (o.jit && device != kLazy) print_block_trace(*gpt, device, o.amp);

    utils::JsonLog log;
    if (!o.log_json.empty()) log = utils::JsonLog(o.log_json);
    // The compiled step traces the eager model itself; evaluation uses the module jit.
    Trainer trainer(o, *gpt, device, o.step ? eager_loss : loss_of, rank == 0);
    utils::Curves curves;
    curves.second_title = "validation loss";
    curves.second_xlabel = "step";
    const bool finished = train(trainer, train_set, val, loss_of, log, curves);
    if (!o.plot.empty()) {
      utils::write_svg(curves, o.plot);
      std::printf("curves: %s\n", o.plot.c_str());
    }
    if (trainer.compiled)
      std::printf("jit: the training step compiled %lld time(s) in %.1f ms, %lld cache hits, arena %.1f MB\n",
                  (long long)trainer.compiled->compiles(), trainer.compiled->last_compile_ms(),
                  (long long)trainer.compiled->cache_hits(), trainer.compiled->arena_bytes() / 1e6);
    else if (o.jit && device != kLazy && jit::cache_misses(*jitted) > 0)
      std::printf("jit: the loss compiled %lld time(s), %lld cache hits\n", (long long)jit::cache_misses(*jitted),
                  (long long)jit::cache_hits(*jitted));
    if (o.distributed) {
      const bool same = same_on_every_rank(*gpt);
      std::printf("data-parallel: the parameters are %s on every rank\n", same ? "the same" : "NOT the same");
      if (!same) return 1;
    }
    if (rank == 0) sample(*gpt, o, device);
    return finished ? 0 : 1;
  } catch (const Error& e) {
    // The other ranks would wait for this one in their next all-reduce.
    if (o.distributed && dist::is_initialized()) dist::abort(std::string("gpt: ") + e.what());
    std::cerr << "gpt: " << e.what() << "\n";
    return 1;
  }
}
