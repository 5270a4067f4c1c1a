// examples/gpt run as a user runs it, for a few steps on a small text in each
// mode: the model's printout, the validation losses, tokens/s, the block's
// trace when jitted, the saved file and the sample.
#include <doctest/doctest.h>

#include "run_example.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <volt/nn/serialize.h>

namespace {

using Run = volt::testing::ExampleRun;

Run run(const std::string& args) { return volt::testing::run_example("gpt " + args); }

// A few kilobytes of English-like text, enough for windows of 128 in both splits.
std::filesystem::path small_corpus() {
  auto dir = std::filesystem::temp_directory_path() / "volt_test_gpt_example";
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "brown.txt");
  for (int i = 0; i < 60; ++i)
    out << "The Fulton County Grand Jury said Friday an investigation of recent primary election produced no evidence "
        << i << " .\n";
  return dir;
}

}  // namespace

TEST_CASE("examples: gpt trains a few steps in each mode and samples from the prompt") {
  const auto dir = small_corpus();
  // A small model (the config flags), so that the four runs stay quick under the sanitizers too.
  const std::string common = "--data-dir " + dir.string() +
                             " --steps 3 --eval-every 2 --batch-size 2 --sample 24 --n-layer 2 --n-head 2 --n-embd 48 "
                             "--block-size 32 ";
  for (const std::string mode : {"--device cpu --eager", "--device cpu --jit module", "--device cpu --jit step", "--device lazy"}) {
    CAPTURE(mode);
    const bool step = mode.find("step") != std::string::npos;
    Run r = run(common + mode + (step ? " --save " + (dir / "ckpt").string() + " --plot " + (dir / "curves.svg").string() : ""));
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("(lm_head): Linear(in_features=48, out_features=256, bias=False)") != std::string::npos);
    CHECK(r.out.find("step 0: val loss 5.5") != std::string::npos);  // about ln 256 = 5.545 untrained
    CHECK(r.out.find("step 2: train loss") != std::string::npos);
    CHECK(r.out.find("step 3: train loss") != std::string::npos);
    CHECK(r.out.find("tokens/s") != std::string::npos);
    CHECK(r.out.find("A sample (temperature 1, top-k 0):\nThe ") != std::string::npos);
    const bool traced = mode.find("--jit") != std::string::npos;
    CHECK((r.out.find("a transformer block's forward") != std::string::npos) == traced);
  }
  // --plot: both panels, a polyline each (train loss at steps 2 and 3; val loss at 0, 2 and 3).
  std::ifstream svg(dir / "curves.svg");
  const std::string drawn((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  CHECK(drawn.find("validation loss") != std::string::npos);
  CHECK(drawn.find("training loss") != std::string::npos);
  size_t lines = 0;
  for (size_t at = drawn.find("<polyline"); at != std::string::npos; at = drawn.find("<polyline", at + 1)) ++lines;
  CHECK(lines == 2);
  auto saved = volt::nn::load_tensors((dir / "ckpt" / "model.safetensors").string());
  bool head = false;
  for (auto& [n, t] : saved) head = head || n == "lm_head.weight";
  CHECK(head);
  CHECK(saved.size() == 2 + 2 * 12 + 2 + 1);  // wte, wpe; 12 per block; ln_f; lm_head
  std::filesystem::remove_all(dir);
}

TEST_CASE("examples: gpt without brown.txt says how to fetch it") {
  Run r = run("--data-dir /nonexistent-volt-dir --device cpu --steps 1");
  CHECK(r.status == 1);
  CHECK(r.out.find("data/fetch_brown.sh") != std::string::npos);
}
