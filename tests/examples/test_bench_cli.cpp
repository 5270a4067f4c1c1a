// volt_bench's command line (bench/options.cpp), parsed in-process: the flags
// keep their meaning, the usage names types, every usage error is status 2
// with a message that says what was expected, a close unknown flag gets "did
// you mean".  And, where the binary was built, that it exits with those statuses.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "bench/options.h"
#include "tests/skip.h"
#include "run_example.h"

namespace {

using volt::benchmark::ParsedArgs;

ParsedArgs parse(std::vector<std::string> args) {
  args.insert(args.begin(), "volt_bench");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return volt::benchmark::parse_command_line(static_cast<int>(argv.size()), argv.data());
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("volt_bench's command line: the flags that test.sh, tests/gpu/check.sh and bench/README.md use") {
  ParsedArgs p = parse({});
  CHECK(p.status == -1);
  CHECK(p.options.model == "mlp");
  CHECK(p.options.modes == volt::benchmark::kModes);
  CHECK(p.options.batches == std::vector<int64_t>{8, 64, 256, 1024});
  CHECK(!p.options.batches_given);
  CHECK(p.options.steps == 0);

  p = parse({"--steps", "2", "--smoke"});
  REQUIRE(p.status == -1);
  CHECK(p.options.steps == 2);
  CHECK(p.options.warmup == 1);
  CHECK(p.options.no_libtorch);
  p = parse({"--smoke"});
  CHECK(p.options.steps == 2);

  p = parse({"--device", "cuda", "--batch", "8,64", "--steps", "200", "--no-libtorch", "--no-extras", "--json"});
  REQUIRE(p.status == -1);
  CHECK(p.options.devices == std::vector<std::string>{"cuda"});
  CHECK(p.options.batches == std::vector<int64_t>{8, 64});
  CHECK(p.options.batches_given);
  CHECK(p.options.steps == 200);
  CHECK(p.options.no_libtorch);
  CHECK(!p.options.extras);
  CHECK(p.options.json);
  CHECK(p.options.eval);

  p = parse({"--model", "gpt", "--mode", "eager,jit,step", "--device=cpu", "--threads", "2", "--amp", "bf16",
             "--no-eval", "--warmup", "3"});
  REQUIRE(p.status == -1);
  CHECK(p.options.model == "gpt");
  CHECK(p.options.modes == std::vector<std::string>{"eager", "jit", "step"});
  CHECK(p.options.modes_given);
  CHECK(p.options.threads == 2);
  CHECK(p.options.amp == "bf16");
  CHECK(!p.options.amp_only);
  CHECK(!p.options.eval);
  CHECK(p.options.warmup == 3);
  CHECK(parse({"--amp", "bf16", "--amp-only"}).options.amp_only);

  p = parse({"--data-dir", "/tmp/mnist", "--epoch", "--busy", "--pytorch", "bench/pytorch_bench.py", "--libtorch",
             "/x/libtorch_bench", "--first-call", "8", "--first-call-device", "cpu"});
  REQUIRE(p.status == -1);
  CHECK(p.options.data_dir == "/tmp/mnist");
  CHECK(p.options.epoch);
  CHECK(p.options.busy);
  CHECK(p.options.pytorch == "bench/pytorch_bench.py");
  CHECK(p.options.libtorch == "/x/libtorch_bench");
  CHECK(p.options.first_call_batch == 8);
}

TEST_CASE("volt_bench's command line: the usage shows type names, no ranges, and hides the internal flags") {
  const ParsedArgs p = parse({"--help"});
  CHECK(p.status == 0);
  INFO(p.text);
  for (const char* s : {"--batch N,...", "--steps N", "--threads N", "--mode NAME,...", "--data-dir PATH", "--amp TYPE",
                        "gpt: examples/gpt"})
    CHECK_MESSAGE(has(p.text, s), s);
  for (const char* s : {"INT", "TEXT", "in [", ">=", "--first-call"}) CHECK_MESSAGE(!has(p.text, s), s);
  // tests/gpu/check.sh reads "cnn ... cuda" on the --model line as "the CNN runs on CUDA": not yet.
  const size_t at = p.text.find("--model");
  REQUIRE(at != std::string::npos);
  const std::string line = p.text.substr(at, p.text.find('\n', at) - at);
  CHECK(has(line, "cnn"));
  CHECK(!has(line, "cuda"));
}

TEST_CASE("volt_bench's command line: every usage error is status 2 and says what was expected") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> errors = {
      {{"--batch", "0"}, "--batch: expected an integer >= 1, got '0'"},
      {{"--batch", "8,x"}, "--batch: expected an integer >= 1, got 'x'"},
      {{"--batch", ","}, "--batch: expected a comma-separated list, got ','"},
      {{"--steps", "two"}, "--steps: expected an integer >= 1, got 'two'"},
      {{"--steps", "0"}, "--steps: expected an integer >= 1, got '0'"},
      {{"--threads", "0"}, "--threads: expected an integer"},
      {{"--model", "rnn"}, "--model: expected one of mlp, cnn, gpt, attention, bf16gemm, got 'rnn'"},
      {{"--mode", "eager,fast"}, "--mode: expected one of eager, jit, step, lazy, got 'fast'"},
      {{"--device", "tpu"}, "--device: expected one of cpu, cuda, got 'tpu'"},
      {{"--amp", "fp8"}, "--amp: expected one of bf16, f16, got 'fp8'"},
      {{"--step", "2"}, "unknown option --step; did you mean --steps?"},
      {{"--no-libtroch"}, "did you mean --no-libtorch?"},
      {{"--steps"}, "--steps"},
      {{"--epoch"}, "--epoch needs --data-dir"},
      {{"--model", "cnn", "--amp", "bf16"}, "--amp: for --model mlp or gpt"},
      {{"--amp-only"}, "--amp-only needs --amp"},
      {{"--no-such-option-at-all"}, "volt_bench: "},
  };
  for (const auto& [args, message] : errors) {
    CAPTURE(args.front());
    const ParsedArgs p = parse(args);
    CHECK(p.status == 2);
    CHECK_MESSAGE(has(p.text, message), p.text);
    CHECK(has(p.text, "(--help lists the options)"));
  }
  CHECK(!has(parse({"--no-such-option-at-all"}).text, "did you mean"));
}

TEST_CASE("volt_bench's exit statuses, where it was built") {
  const std::filesystem::path bench = std::filesystem::path(VOLT_BUILD_DIR) / "bench" / "volt_bench";
  if (!std::filesystem::exists(bench)) {
    VOLT_SKIP(bench.string() + " was not built (this build's targets leave the benchmark out)");
  }
  using volt::testing::run_command;
  CHECK(run_command(bench.string() + " --help").status == 0);
  const auto r = run_command(bench.string() + " --batch 0");
  CHECK(r.status == 2);
  CHECK(has(r.out, "--batch: expected an integer >= 1, got '0'"));
  CHECK(run_command(bench.string() + " --step 2").status == 2);
#ifdef VOLT_WITH_MPI
  // The data-parallel cells' own options are read before MPI starts, so the
  // usage errors need no mpirun.
  auto d = run_command(bench.string() + " --distributed --batch 6,7");
  CHECK(d.status == 2);
  CHECK(has(d.out, "--batch: expected even sizes (one half per rank), got 7"));
  d = run_command(bench.string() + " --distributed --step 2");
  CHECK(d.status == 2);
  CHECK(has(d.out, "did you mean --steps?"));
  d = run_command(bench.string() + " --distributed --steps 0");
  CHECK(d.status == 2);
  CHECK(has(d.out, "--steps: expected an integer >= 1, got '0'"));
  CHECK(run_command(bench.string() + " --distributed --help").status == 0);
#endif
}
