// The extend_* examples, run as a user runs them: each checks its own results
// (exit status 1 on any failed check); here their printed traces are checked
// against the notebook's structure too.
#include <doctest/doctest.h>

#include "run_example.h"

#include <cstdio>
#include <regex>
#include <string>

#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/runtime.h>
#include "tests/skip.h"
#endif

namespace {

using Run = volt::testing::ExampleRun;

Run run(const std::string& args) { return volt::testing::run_example(args); }

int count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("examples: extend_multimul runs every cell, mymul_grad's trace has one multimul") {
  Run r = run("extend_multimul");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("all checks passed") != std::string::npos);
  // The grad transform's cell: both gradients from one multimul of (b, g, a, g).
  const size_t at = r.out.find("==== 7.");
  REQUIRE(at != std::string::npos);
  const std::string cell = r.out.substr(at, r.out.find("==== 8.") - at);
  CHECK(count(cell, R"(\(t\d+, t\d+\) = multimul\(t_1, (t\d+), t_0, \1\))") == 1);
  CHECK(count(cell, R"(= multimul\()") == 1);
}

TEST_CASE("examples: extend_cross_entropy prints the notebook's traces and matches volt's built-in path") {
  Run r = run("extend_cross_entropy --rows 40 --classes 300 --repeats 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("all checks passed") != std::string::npos);
  CHECK(count(r.out, R"(\n  \(t\d+, _\) = fused_cross_entropy\(t_0, t_1, 'mean', -1, 0\.0\)\n)") == 1);
  // The grad trace: the forward keeps only the log-sum-exp, which the backward reads.
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex(R"(\n  \(_, (t\d+)\) = fused_cross_entropy\(t_0, t_1, 'mean', -1, 0\.0\)\n)")));
  CHECK(count(r.out, R"(\n  t\d+ = fused_cross_entropy_backward\(t\d+, t_0, target=t_1, max_log_sum_exp=)" + m[1].str() +
                         R"(, reduction='mean', ignore_index=-1, label_smoothing=0\.0\))") == 1);
  CHECK(count(r.out, R"(speed ratio, built-in jit / executor: [0-9.]+; eager / executor: [0-9.]+  \[40 x 300, cpu\])") == 1);
  CHECK(r.out.find("FAILED") == std::string::npos);
}

TEST_CASE("cuda: the extend_cross_entropy example on the GPU, its own kernels against volt's") {
#ifdef VOLT_WITH_CUDA
  if (!volt::cuda::is_available()) {
    VOLT_SKIP("no CUDA GPU or driver on this machine");
  }
  Run r = run("extend_cross_entropy --device cuda --rows 24 --classes 200 --repeats 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("all checks passed") != std::string::npos);
  CHECK(r.out.find("# t_0: \"cuda:0 f32[24, 200]\"") != std::string::npos);
  CHECK(count(r.out, R"(fused_cross_entropy_backward\()") >= 1);
#else
  VOLT_SKIP("a build without CUDA");
#endif
}
