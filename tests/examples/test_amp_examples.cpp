// --amp in examples/gpt and examples/mnist_mlp: a few GPT steps in bf16 in
// every mode (and f16 with loss scaling eagerly), the casts in the printed
// block trace, and the usage errors (exit status 2).
#include <doctest/doctest.h>

#include "run_example.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

using Run = volt::testing::ExampleRun;

std::filesystem::path amp_corpus() { return volt::testing::small_text_corpus("volt_test_amp_example"); }

}  // namespace

TEST_CASE("examples: gpt --amp bf16 trains in every mode, f16 with loss scaling; the block trace shows the casts") {
  const auto dir = amp_corpus();
  const std::string common = "gpt --data-dir " + dir.string() +
                             " --steps 3 --eval-every 3 --batch-size 2 --sample 8 --n-layer 1 --n-head 2 --n-embd 32 "
                             "--block-size 16 ";
  for (const std::string mode : {"--amp bf16 --device cpu --eager", "--amp bf16 --device cpu --jit module",
                                 "--amp bf16 --device cpu --jit step", "--amp bf16 --device lazy",
                                 "--amp f16 --device cpu --eager"}) {
    CAPTURE(mode);
    Run r = volt::testing::run_example(common + mode);
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("mixed precision: autocast to") != std::string::npos);
    CHECK(r.out.find("step 3: train loss") != std::string::npos);
    if (mode.find("--jit module") != std::string::npos) CHECK(r.out.find("bf16[") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("examples: --amp with a bad type, and f16 with a compiled step, are usage errors") {
  for (const std::string prog : {"gpt", "mnist_mlp"}) {
    CAPTURE(prog);
    Run r = volt::testing::run_example(prog + " --amp f32");
    CHECK(r.status == 2);
    CHECK(r.out.find("--amp: expected bf16 or f16, got 'f32'") != std::string::npos);
    r = volt::testing::run_example(prog + " --amp f16 --jit step");
    CHECK(r.status == 2);
    CHECK(r.out.find("use --amp bf16 with --jit step") != std::string::npos);
  }
}
