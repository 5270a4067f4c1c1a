// A checkpoint is taken whole or not at all: files of two saves side by side
// are refused, and a load that fails for any reason (a damaged file, optimizer
// state out of range, a state file holding only the learning rate) leaves the
// model and the optimizer exactly as they were.
#include <doctest/doctest.h>

#include "tests/error_of.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/nn/checkpoint.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

fs::path test_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("volt-test-ckpt-atomic-" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(3);
  return std::make_shared<nn::MLP>(4, std::vector<int64_t>{6, 2}, true, 0.0);
}

void train(nn::MLP& net, nn::Optimizer& opt, int steps, uint64_t seed) {
  manual_seed(seed);
  for (int i = 0; i < steps; ++i) {
    Tensor y = net(Tensor::randn({5, 4}));
    Tensor loss = mul(y, y).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// Everything a failed load must leave alone: parameters and optimizer state, as values.
std::vector<std::vector<double>> snapshot(nn::MLP& net, nn::Optimizer& opt) {
  std::vector<std::vector<double>> r;
  for (const Tensor& p : net.parameters()) r.push_back(p.to_vector<double>());
  for (const auto& [name, t] : opt.state_dict()) r.push_back(t.to_vector<double>());
  return r;
}

using volt::testing::error_of;

}  // namespace

TEST_CASE("load_checkpoint: files of two different saves are refused, nothing assigned") {
  const fs::path a = test_dir("a"), b = test_dir("b");
  auto net = make_net();
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  train(*net, opt, 3, 1);
  nn::save_checkpoint(a.string(), *net, opt, {1, 3});
  train(*net, opt, 2, 2);
  nn::save_checkpoint(b.string(), *net, opt, {1, 5});
  // A crash between renames: b's model beside a's optimizer file and trainer.json.
  fs::copy_file(b / "model.safetensors", a / "model.safetensors", fs::copy_options::overwrite_existing);
  auto other = make_net();
  nn::Adam other_opt(other->parameters(), {.lr = 1e-2});
  train(*other, other_opt, 4, 3);
  const auto before = snapshot(*other, other_opt);
  const std::string e = error_of([&] { nn::load_checkpoint(a.string(), *other, other_opt); });
  CHECK(e.find("model.safetensors") != std::string::npos);
  CHECK(e.find("torn or mixed checkpoint") != std::string::npos);
  CHECK(snapshot(*other, other_opt) == before);
  // b itself is whole and loads.
  CHECK_NOTHROW(nn::load_checkpoint(b.string(), *other, other_opt));
  CHECK(snapshot(*other, other_opt) == snapshot(*net, opt));
  fs::remove_all(a.parent_path());
}

TEST_CASE("load_checkpoint: a damaged or out-of-range optimizer file leaves model and optimizer untouched") {
  const fs::path dir = test_dir("range");
  auto net = make_net();
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  train(*net, opt, 3, 1);
  nn::save_checkpoint(dir.string(), *net, opt, {1, 3});
  const nn::NamedTensors good = opt.state_dict();
  // The optimizer state, one field damaged at a time.
  auto with = [&](const std::string& name, double value) {
    nn::NamedTensors s = good;
    for (auto& [n, t] : s)
      if (n == name) {
        t = t.clone();
        t.reshape({-1}).narrow(0, 0, 1).fill_(value);
      }
    return s;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Damage {
    const char* what;
    nn::NamedTensors state;
    const char* expect;
  };
  const std::vector<Damage> damages = {
      {"NaN step", with("state.0.step", nan), "'state.0.step' holds nan"},
      {"negative step", with("state.1.step", -1), "'state.1.step' holds -1 (it must be >= 0)"},
      {"1e300 step", with("state.0.step", 1e300), "a step count must be a whole number"},
      {"fractional step", with("state.0.step", 2.5), "a step count must be a whole number"},
      {"negative exp_avg_sq", with("state.2.exp_avg_sq", -0.5), "'state.2.exp_avg_sq' holds -0.5"},
      {"NaN exp_avg", with("state.3.exp_avg", nan), "'state.3.exp_avg' holds nan"},
      {"infinite lr", with("lr", std::numeric_limits<double>::infinity()), "'lr' holds inf"},
      {"only lr", {good.front()}, "missing 'state.0.exp_avg'"},
  };
  auto other = make_net();
  nn::Adam other_opt(other->parameters(), {.lr = 1e-2});
  train(*other, other_opt, 5, 2);
  const auto before = snapshot(*other, other_opt);
  for (const Damage& d : damages) {
    CAPTURE(d.what);
    // Directly...
    std::string e = error_of([&] { other_opt.load_state_dict(d.state); });
    CHECK(e.find("load_state_dict") != std::string::npos);
    CHECK(e.find(d.expect) != std::string::npos);
    CHECK(snapshot(*other, other_opt) == before);
    // ...and as the checkpoint's optimizer file (trainer.json without the
    // fingerprints, as an older save wrote it, so the state itself is checked).
    nn::save_tensors(d.state, (dir / "optimizer.safetensors").string());
    nlohmann::json trainer = nlohmann::json::parse(std::ifstream(dir / "trainer.json"));
    trainer.erase("files");
    std::ofstream(dir / "trainer.json", std::ios::trunc) << trainer.dump();
    e = error_of([&] { nn::load_checkpoint(dir.string(), *other, other_opt); });
    CHECK(e.find(d.expect) != std::string::npos);
    CHECK(snapshot(*other, other_opt) == before);
  }
  // A truncated optimizer file (fingerprints kept): refused, nothing changed.
  nn::save_checkpoint(dir.string(), *net, opt, {1, 3});
  std::string bytes;
  {
    std::ifstream in(dir / "optimizer.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(dir / "optimizer.safetensors", std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  CHECK(error_of([&] { nn::load_checkpoint(dir.string(), *other, other_opt); }).find("optimizer.safetensors") !=
        std::string::npos);
  CHECK(snapshot(*other, other_opt) == before);
  // A state of the wrong dtype is refused, not converted.
  nn::NamedTensors wrong = good;
  wrong[2].second = wrong[2].second.to(DType::f64);
  CHECK(error_of([&] { other_opt.load_state_dict(wrong); }).find("has dtype f64, its parameter f32") !=
        std::string::npos);
  CHECK(snapshot(*other, other_opt) == before);
  fs::remove_all(dir.parent_path());
}
