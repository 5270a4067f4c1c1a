// Pins the printed structure of the seed MLP's traces: training forward,
// training backward and eval.  Proxy numbers and timings are masked (they may
// change); ops, their nesting, fusions, del lines and signatures may not.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

// Proxy names renumbered in order of first appearance (t0, t1, ...), so the
// dataflow is pinned (which value each op reads and deletes) while the
// tracer's own numbering may change; timings masked.
std::string masked(const std::string& trace) {
  static const std::regex name("\\bt[0-9]+\\b");
  std::map<std::string, int> renamed;
  std::string out;
  auto last = trace.cbegin();
  for (std::sregex_iterator it(trace.begin(), trace.end(), name), end; it != end; ++it) {
    out.append(last, (*it)[0].first);
    auto [at, fresh] = renamed.emplace(it->str(), static_cast<int>(renamed.size()));
    out += "t" + std::to_string(at->second);
    last = (*it)[0].second;
  }
  out.append(last, trace.cend());
  return std::regex_replace(out, std::regex("took [0-9]+ milliseconds"), "took # milliseconds");
}

std::string golden(const char* name) {
  std::ifstream in(std::string(VOLT_TEST_DATA_DIR) + "/" + name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// VOLT_UPDATE_GOLDEN=DIR rewrites the files (then reads them back); never
// under CI, where a rewrite would make the check pass whatever it printed.
void check_golden(const char* name, const std::string& got) {
  if (const char* dir = std::getenv("VOLT_UPDATE_GOLDEN")) {
    REQUIRE_MESSAGE(std::getenv("CI") == nullptr, "VOLT_UPDATE_GOLDEN is refused where CI is set");
    const std::string path = std::string(dir) + "/" + name;
    std::ofstream(path) << got;
    std::ifstream in(path);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == got);
    return;
  }
  std::string want = golden(name);
  CHECK_MESSAGE(got == want, name << " changed; it is now:\n" << got);
}

}  // namespace

TEST_CASE("golden: renumbered names match, swapped operands and a wrong del do not") {
  const std::string trace = "t5 = prims.sub(t3, t4)\n  del t3\nt6 = prims.mul(t5, t4)\n";
  CHECK(masked(trace) == "t0 = prims.sub(t1, t2)\n  del t1\nt3 = prims.mul(t0, t2)\n");
  CHECK(masked("t15 = prims.sub(t13, t14)\n  del t13\nt16 = prims.mul(t15, t14)\n") == masked(trace));
  CHECK(masked("t5 = prims.sub(t4, t3)\n  del t3\nt6 = prims.mul(t5, t4)\n") != masked(trace));
  CHECK(masked("t5 = prims.sub(t3, t4)\n  del t4\nt6 = prims.mul(t5, t4)\n") != masked(trace));
  CHECK(masked("took 12 milliseconds") == "took # milliseconds");
}

TEST_CASE("golden: the structure of the seed MLP's training forward, backward and eval traces") {
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
  Tensor x = Tensor::rand({8, 784});
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8});

  model->eval();
  model->requires_grad_(false);
  auto jitted_eval = jit::jit(model);
  jitted_eval(x);

  model->train();
  model->requires_grad_(true);
  auto jitted_train = jit::jit(model);
  cross_entropy(jitted_train(x), y).backward();

  check_golden("mlp_train_forward.txt", masked(jit::last_traces(jitted_train).back().str()));
  check_golden("mlp_train_backward.txt", masked(jit::last_backward_traces(jitted_train).back().str()));
  check_golden("mlp_eval.txt", masked(jit::last_traces(jitted_eval).back().str()));
}
