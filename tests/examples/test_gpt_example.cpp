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
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <volt/nn/serialize.h>

namespace {

using Run = volt::testing::ExampleRun;

Run run(const std::string& args) { return volt::testing::run_example("gpt " + args); }

std::filesystem::path small_corpus() { return volt::testing::small_text_corpus("volt_test_gpt_example"); }

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
    Run r = run(common + mode + (step ? " --save " + (dir / "ckpt").string() + " --plot " + (dir / "curves.svg").string() +
                                               " --log-json " + (dir / "log.jsonl").string()
                                         : ""));
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
  // --log-json: the evaluation before training, then a "step" record at each evaluation (steps 2 and 3).
  std::ifstream log(dir / "log.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(log, line);) records.push_back(nlohmann::json::parse(line));
  REQUIRE(records.size() == 3);
  const char* types[] = {"eval", "step", "step"};
  const int steps[] = {0, 2, 3};
  for (int i = 0; i < 3; ++i) {
    CHECK(records[i]["type"] == types[i]);
    CHECK(records[i]["step"] == steps[i]);
    CHECK(records[i]["time"].get<double>() > 1.7e9);  // seconds since 1970: after 2023
    CHECK(records[i]["val_loss"].is_number());
  }
  CHECK(records[2]["loss"].is_number());
  CHECK(records[2]["tokens_per_s"].get<double>() > 0);
  auto saved = volt::nn::load_tensors((dir / "ckpt" / "model.safetensors").string());
  bool head = false;
  for (auto& [n, t] : saved) head = head || n == "lm_head.weight";
  CHECK(head);
  CHECK(saved.size() == 2 + 2 * 12 + 2 + 1);  // wte, wpe; 12 per block; ln_f; lm_head
  std::filesystem::remove_all(dir);
}

TEST_CASE("examples: gpt stopped after 3 steps and resumed to 6 ends as one run of 6 steps, in each mode") {
  const auto dir = small_corpus();
  const std::string common = "--data-dir " + dir.string() +
                             " --eval-every 2 --batch-size 2 --sample 0 --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 ";
  for (const std::string mode : {"--device cpu --eager", "--device cpu --jit step", "--device lazy"}) {
    CAPTURE(mode);
    const std::string whole = (dir / "whole").string(), half = (dir / "half").string();
    Run a = run(common + mode + " --steps 6 --save " + whole);
    INFO(a.out);
    REQUIRE(a.status == 0);
    CHECK(a.out.find("checkpoint after step 6: " + whole) != std::string::npos);
    Run b = run(common + mode + " --steps 3 --save " + half + " --save-every 2");
    INFO(b.out);
    REQUIRE(b.status == 0);
    CHECK(b.out.find("checkpoint after step 2: ") != std::string::npos);  // --save-every
    CHECK(b.out.find("checkpoint after step 3: ") != std::string::npos);  // the end
    Run c = run(common + mode + " --steps 6 --resume " + half + " --save " + half);
    INFO(c.out);
    REQUIRE(c.status == 0);
    CHECK(c.out.find("resumed from " + half + ": after step 3") != std::string::npos);
    CHECK(c.out.find("step 3: val loss") != std::string::npos);
    CHECK(c.out.find("step 2: train loss") == std::string::npos);  // the steps before were not trained again
    // The same schedule, batches and moments: the same parameters, bit for bit.
    auto x = volt::nn::load_tensors(whole + "/model.safetensors"), y = volt::nn::load_tensors(half + "/model.safetensors");
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x[i].first);
      CHECK(x[i].first == y[i].first);
      CHECK(x[i].second.to_vector<float>() == y[i].second.to_vector<float>());
    }
    std::filesystem::remove_all(whole);
    std::filesystem::remove_all(half);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("examples: gpt --save-every without --save, and --distributed on the lazy device, are usage errors") {
  CHECK(run("--save-every 5 --steps 1").status == 2);
  Run r = run("--device lazy --distributed --steps 1");
  CHECK(r.status == 2);
  CHECK(r.out.find("--distributed runs on cpu or cuda") != std::string::npos);
}

TEST_CASE("examples: gpt without brown.txt says how to fetch it") {
  Run r = run("--data-dir /nonexistent-volt-dir --device cpu --steps 1");
  CHECK(r.status == 1);
  CHECK(r.out.find("`data/fetch_brown.sh /nonexistent-volt-dir`") != std::string::npos);
}
