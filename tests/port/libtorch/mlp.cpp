// A small MLP classifier on a synthetic two-class problem (is x0 * x1 > 0?),
// trained with Adam and a step schedule, then saved, loaded and checked.  The
// two copies of this program (tests/port/libtorch/ and tests/port/volt/)
// differ only by the renames in tests/port/renames.sed.
//
// Usage: mlp [STEPS [SAVE_PATH]]
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

using namespace torch::indexing;

struct MLP : torch::nn::Module {
  MLP(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    bn1 = register_module("bn1", torch::nn::BatchNorm1d(hidden));
    drop = register_module("drop", torch::nn::Dropout(0.1));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, out));
  }

  // x: (B, in) -> (B, out) logits
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(drop->forward(torch::relu(bn1->forward(fc1->forward(x)))));
  }

  torch::nn::Linear fc1{nullptr};
  torch::nn::BatchNorm1d bn1{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear fc2{nullptr};
};

int main(int argc, char* argv[]) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  const std::string path = argc > 2 ? argv[2] : "mlp.pt";
  torch::manual_seed(0);

  const int64_t n = 512;
  torch::Tensor x = torch::randn({n, 2});
  torch::Tensor y = (x.index({Slice(), 0}) * x.index({Slice(), 1}) > 0).to(torch::kLong);
  std::cout << "data " << x.sizes() << ", labels " << y.sizes() << ", positive " << y.sum().item<int64_t>() << "\n";

  auto model = std::make_shared<MLP>(2, 32, 2);
  for (const auto& p : model->named_parameters()) std::cout << p.key() << " " << p.value().sizes() << "\n";

  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(1e-4));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/100, /*gamma=*/0.5);

  float first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    model->train();
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    scheduler.step();
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 100 == 0) {
      std::cout << "step " << step << " loss " << last << " lr " << optimizer.param_groups()[0].options().get_lr()
                << "\n";
    }
  }

  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor logits = model->forward(x);
  const float accuracy = logits.argmax(1).eq(y).to(torch::kFloat).mean().item<float>();
  std::cout << "loss " << first << " -> " << last << ", accuracy " << accuracy << ", largest logit "
            << logits.abs().max().item<float>() << "\n";

  torch::save(model, path);
  auto loaded = std::make_shared<MLP>(2, 32, 2);
  torch::load(loaded, path);
  loaded->eval();
  const bool same = torch::allclose(loaded->forward(x), logits);
  std::cout << "reloaded model " << (same ? "matches" : "differs") << "\n";
  return same && last < first ? 0 : 1;
}
