// volt_bench's command line (bench/options.h), parsed with CLI11 as the
// examples parse theirs (volt/utils/cli.h): type names in the usage, a bad
// value named with what was expected, "did you mean" for a close unknown flag,
// exit status 2 for every usage error.
#include "options.h"

#include <cstdlib>
#include <iostream>

#include <volt/utils/cli.h>

namespace volt::benchmark {

namespace cli = volt::utils::cli;

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "volt_bench: " << message << "\n(--help lists the options)\n";  // as cli::usage_error
  std::exit(2);
}

ParsedArgs parse_command_line(int argc, const char* const* argv) {
  ParsedArgs parsed;
  Options& o = parsed.options;
  CLI::App app{"Times volt's training steps (and LibTorch's, PyTorch's) on the MNIST MLP and other models", "volt_bench"};
  cli::setup(app);
  app.get_formatter()->column_width(26);
  app.add_option("--model", o.model,
                 "mlp (default) or cnn: the MNIST CNN, Adadelta, cpu training steps,\n"
                 "batch 64 unless --batch (bench/cnn_workload.h); gpt: examples/gpt's\n"
                 "GPT, AdamW, batch 16 unless --batch, cpu and cuda (bench/gpt_workload.h);\n"
                 "attention: flash against the decomposition, forward+backward, cpu,\n"
                 "--batch gives the sequence lengths (bench/attention_bench.h); bf16gemm:\n"
                 "the bf16 GEMM alone against the vdpbf16ps and AMX loops, at 1024^3 and\n"
                 "at the GPT's and the MLP's shapes (bench/cpu_figures.h)")
      ->type_name("NAME")->check(cli::one_of({"mlp", "cnn", "gpt", "attention", "bf16gemm"}));
  std::string modes, devices, batches;
  app.add_option("--mode", modes,
                 "eager,jit,step,lazy (default: all of them; step: the whole training step\n"
                 "compiled by volt::jit::compile_step)")
      ->type_name("NAME,...")->check(cli::each(cli::one_of(kModes)));
  app.add_option("--device", devices, "cpu,cuda (default: both; cuda only when available)")
      ->type_name("NAME,...")->check(cli::each(cli::one_of({"cpu", "cuda"})));
  app.add_option("--batch", batches, "batch sizes (default 8,64,256,1024)")
      ->type_name("N,...")->check(cli::each(cli::count(1)));
  app.add_option("--steps", o.steps, "timed steps per cell (default: until the median is stable)")
      ->check(cli::count(1));
  app.add_option("--warmup", o.warmup, "untimed steps per cell first (default: automatic)")->check(cli::count(0));
  app.add_option("--data-dir", o.data_dir, "MNIST batches from PATH (data::MNIST) instead of synthetic ones")
      ->type_name("PATH");
  bool no_eval = false, no_extras = false;
  app.add_flag("--no-eval", no_eval, "time training steps only");
  app.add_flag("--no-extras", no_extras, "skip first-call, overhead, bandwidth and memory figures");
  app.add_option("--libtorch", o.libtorch, "the libtorch_bench binary to compare with (default: next to volt_bench)")
      ->type_name("PATH");
  app.add_flag("--no-libtorch", o.no_libtorch, "do not run LibTorch");
  app.add_option("--pytorch", o.pytorch,
                 "also run bench/pytorch_bench.py (with $VOLT_PYTHON, default /usr/bin/python3)")
      ->type_name("PATH");
  app.add_option("--threads", o.threads, "CPU threads for volt and LibTorch (default: OMP_NUM_THREADS or all cores)")
      ->check(cli::count(1));
  app.add_option("--amp", o.amp,
                 "bf16 or f16: time every mlp/gpt cell again with autocast to TYPE (mode\n"
                 "\"jit+bf16\"; volt::AutocastGuard, StepOptions::autocast), and LibTorch's\n"
                 "CPU autocast for bf16")
      ->type_name("TYPE")->check(cli::one_of({"bf16", "f16"}));
  app.add_flag("--amp-only", o.amp_only,
               "with --amp: run the autocast cells alone (volt's, and LibTorch's bf16 one),\n"
               "without the f32 cells, e.g. to profile them");
  app.add_flag("--busy", o.busy, "also run an eager cell with 1 and 2 threads while 2 busy processes compete");
  app.add_flag("--epoch", o.epoch, "with --data-dir: time a full epoch per mode and batch (the example's loop)");
  app.add_flag("--json", o.json, "print one JSON array instead of tables");
  app.add_flag("--smoke", o.smoke, "every cell, few steps, no LibTorch, no cold compile (for ./test.sh)");
  // Internal: the child process that measures one first call (bench/extra_figures.cpp).
  app.add_option("--first-call", o.first_call_batch)->group("")->check(cli::count(1));
  app.add_option("--first-call-device", o.first_call_device)->group("")->check(cli::one_of({"cpu", "cuda"}));
  if (cli::Outcome r = cli::try_parse(app, argc, argv); r.status >= 0) {
    parsed.status = r.status;
    parsed.text = r.text;
    return parsed;
  }
  auto usage = [&](const std::string& message) {
    parsed.status = 2;
    parsed.text = cli::usage_error_text(app, message);
    return parsed;
  };

  o.eval = !no_eval;
  o.extras = !no_extras;
  o.modes_given = app.count("--mode") > 0;
  if (o.modes_given) o.modes = cli::split_list(modes);
  if (app.count("--device")) o.devices = cli::split_list(devices);
  o.batches_given = app.count("--batch") > 0;
  if (o.batches_given) {
    o.batches.clear();
    for (const std::string& b : cli::split_list(batches)) o.batches.push_back(std::stoll(b));
  }
  if (o.epoch && o.data_dir.empty()) return usage("--epoch needs --data-dir");
  if (!o.amp.empty() && o.model != "mlp" && o.model != "gpt") return usage("--amp: for --model mlp or gpt");
  if (o.amp_only && o.amp.empty()) return usage("--amp-only needs --amp");
  if (o.smoke) {
    if (app.count("--steps") == 0) o.steps = 2;
    if (o.warmup < 0) o.warmup = 1;
    o.no_libtorch = true;
    o.pytorch.clear();
  }
  return parsed;
}

Options parse_args(int argc, char** argv) {
  ParsedArgs parsed = parse_command_line(argc, argv);
  cli::finish({parsed.status, parsed.text});
  return parsed.options;
}

}  // namespace volt::benchmark
