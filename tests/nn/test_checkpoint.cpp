// A run stopped mid-epoch and resumed from a checkpoint in fresh objects ends
// bit for bit where the uninterrupted run ends; optimizer state dicts round-trip.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <volt/data/dataloader.h>
#include <volt/nn/checkpoint.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

data::TensorDataset toy_data() {
  manual_seed(42);
  Tensor x = Tensor::randn({40, 6});
  Tensor y = (x.narrow(1, 0, 1).reshape({-1}) > 0.0).to(DType::i64);
  return data::TensorDataset(x, y);
}

std::shared_ptr<nn::MLP> make_net(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::MLP>(6, std::vector<int64_t>{16, 2}, true, /*dropout=*/0.2);
}

// Trains from `from` (epoch, step) up to the end of `epochs`, or stops after
// `stop_after` steps in total and returns there.
nn::TrainingPosition train(nn::MLP& net, nn::Optimizer& opt, const data::TensorDataset& ds, int64_t epochs,
                           nn::TrainingPosition from, int64_t stop_after = -1) {
  nn::CrossEntropyLoss loss_fn;
  auto sampler = std::make_shared<data::RandomSampler>(ds.size(), 7);
  data::DataLoader loader(ds, 4, sampler);
  int64_t taken = 0;
  for (int64_t epoch = from.epoch; epoch <= epochs; ++epoch) {
    sampler->set_epoch(epoch - 1);
    int64_t step = 0;
    for (const auto& [x, y] : loader) {
      if (epoch == from.epoch && step < from.step) {
        ++step;  // already trained before the checkpoint
        continue;
      }
      if (taken == stop_after) return {epoch, step};
      Tensor loss = loss_fn(net(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      ++step;
      ++taken;
    }
  }
  return {epochs + 1, 0};
}

std::vector<std::vector<float>> values(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("checkpoint: a resumed run equals the uninterrupted run bit for bit (Adam, dropout)") {
  const auto ds = toy_data();
  fs::path dir = fs::temp_directory_path() / ("volt_test_checkpoint_" + std::to_string(::getpid()));
  fs::remove_all(dir);

  auto whole = make_net(1);
  nn::Adam whole_opt(whole->parameters(), {.lr = 0.01});
  manual_seed(5);
  train(*whole, whole_opt, ds, 2, {1, 0});

  auto first = make_net(1);
  nn::Adam first_opt(first->parameters(), {.lr = 0.01});
  manual_seed(5);
  nn::TrainingPosition stopped = train(*first, first_opt, ds, 2, {1, 0}, /*stop_after=*/13);
  CHECK(stopped.epoch == 2);
  CHECK(stopped.step == 3);  // 10 steps per epoch
  nn::save_checkpoint(dir.string(), *first, first_opt, stopped);
  CHECK(fs::exists(dir / "model.safetensors"));
  CHECK(fs::exists(dir / "optimizer.safetensors"));
  CHECK(fs::exists(dir / "trainer.json"));

  auto resumed = make_net(99);  // other weights, another generator state: all replaced
  nn::Adam resumed_opt(resumed->parameters(), {.lr = 0.5});
  manual_seed(1234);
  nn::TrainingPosition at = nn::load_checkpoint(dir.string(), *resumed, resumed_opt);
  CHECK(at.epoch == 2);
  CHECK(at.step == 3);
  CHECK(resumed_opt.lr() == 0.01);
  CHECK(resumed_opt.step_count(0) == 13);
  train(*resumed, resumed_opt, ds, 2, at);
  CHECK(values(*resumed) == values(*whole));
  fs::remove_all(dir);
}

TEST_CASE("optimizer state_dict: PyTorch's names, a round trip, and every misfit listed") {
  Tensor w = Tensor::ones({3}).requires_grad_();
  nn::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  CHECK(sgd.state_dict().size() == 1);  // only "lr" before the first step
  (w * w).sum().backward();
  sgd.step();
  nn::NamedTensors st = sgd.state_dict();
  REQUIRE(st.size() == 2);
  CHECK(st[1].first == "state.0.momentum_buffer");
  CHECK(st[1].second.to_vector<float>() == std::vector<float>{2, 2, 2});

  Tensor w2 = Tensor::ones({3}).requires_grad_();
  nn::SGD sgd2({w2}, {.lr = 1.0, .momentum = 0.9});
  sgd2.load_state_dict(st);
  CHECK(sgd2.lr() == doctest::Approx(0.1));
  // The same next step as the original, from the loaded momentum.
  {
    NoGradGuard g;
    w2.copy_(w);
  }
  sgd.zero_grad();
  (w * w).sum().backward();
  (w2 * w2).sum().backward();
  sgd.step();
  sgd2.step();
  CHECK(w.to_vector<float>() == w2.to_vector<float>());

  Tensor a = Tensor::ones({2, 2}).requires_grad_();
  nn::Adadelta ada({a});
  (a * a).sum().backward();
  ada.step();
  nn::NamedTensors ast = ada.state_dict();
  CHECK(ast.size() == 3);
  CHECK(ast[1].first == "state.0.square_avg");
  CHECK(ast[2].first == "state.0.acc_delta");

  nn::NamedTensors bad = {{"state.0.exp_avg", Tensor::zeros({3})}, {"state.5.momentum_buffer", Tensor::zeros({3})},
                          {"state.0.momentum_buffer", Tensor::zeros({4})}};
  std::string message;
  try {
    sgd2.load_state_dict(bad);
  } catch (const volt::Error& e) {
    message = e.what();
  }
  CHECK(message.find("unexpected 'state.0.exp_avg'") != std::string::npos);
  CHECK(message.find("unexpected 'state.5.momentum_buffer'") != std::string::npos);
  CHECK(message.find("'state.0.momentum_buffer' has shape [4], its parameter [3]") != std::string::npos);
}

TEST_CASE("load_checkpoint: a missing or damaged checkpoint is an error naming the file") {
  fs::path dir = fs::temp_directory_path() / ("volt_test_checkpoint_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto net = make_net(1);
  nn::Adam opt(net->parameters());
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.string(), *net, opt), doctest::Contains("trainer.json"), volt::Error);
  fs::create_directories(dir);
  std::ofstream(dir / "trainer.json") << "{\"format\": \"volt checkpoint 1\", \"epoch\": 1";
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.string(), *net, opt), doctest::Contains("not valid JSON"), volt::Error);
  std::ofstream(dir / "trainer.json") << "{\"format\": \"volt checkpoint 1\", \"epoch\": 1}";
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.string(), *net, opt), doctest::Contains("lacks a field"), volt::Error);
  // Counts that are not whole numbers in range: refused, never truncated or wrapped.
  nn::save_checkpoint(dir.string(), *net, opt, {2, 3});
  for (const char* bad : {"\"epoch\": 1.9", "\"epoch\": 1e30", "\"epoch\": 0", "\"step\": -4",
                          "\"rng_seed\": -1", "\"rng_offset\": 0.5"}) {
    const std::string field = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    std::ofstream(dir / "trainer.json")
        << "{\"format\": \"volt checkpoint 1\", \"epoch\": 2, \"step\": 3, \"rng_seed\": 7, \"rng_offset\": 0, "
        << "\"lr\": 0.001, " << bad << "}";
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.string(), *net, opt),
                         doctest::Contains((field + " must be a whole number").c_str()), volt::Error);
  }
  // A damaged optimizer file fails the load before the model is touched.
  nn::save_checkpoint(dir.string(), *make_net(7), opt, {2, 3});
  std::ofstream(dir / "optimizer.safetensors", std::ios::trunc) << "not a safetensors file";
  const auto before = values(*net);
  CHECK_THROWS_AS(nn::load_checkpoint(dir.string(), *net, opt), volt::Error);
  CHECK(values(*net) == before);
  fs::remove_all(dir);
}
