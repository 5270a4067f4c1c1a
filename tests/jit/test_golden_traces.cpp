// Pins the printed structure of the seed MLP's traces: training forward,
// training backward and eval.  Proxy numbers and timings are masked (they may
// change); ops, their nesting, fusions, del lines and signatures may not.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

std::string masked(const std::string& trace) {
  std::string s = std::regex_replace(trace, std::regex("\\bt[0-9]+\\b"), "t#");
  return std::regex_replace(s, std::regex("took [0-9]+ milliseconds"), "took # milliseconds");
}

std::string golden(const char* name) {
  std::ifstream in(std::string(VOLT_TEST_DATA_DIR) + "/" + name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void check_golden(const char* name, const std::string& got) {
  if (const char* dir = std::getenv("VOLT_UPDATE_GOLDEN")) {
    std::ofstream(std::string(dir) + "/" + name) << got;
    return;
  }
  std::string want = golden(name);
  CHECK_MESSAGE(got == want, name << " changed; it is now:\n" << got);
}

}  // namespace

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
