// A small MLP classifier on a synthetic two-class problem (is x0 * x1 > 0?),
// trained with Adam and a step schedule, then saved, loaded and checked.  The
// two copies of this program (tests/port/libtorch/ and tests/port/volt/)
// differ only by the renames in tests/port/renames.sed.
//
// Usage: mlp [STEPS [SAVE_PATH]]
#include <volt/volt.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

using namespace volt::indexing;

struct MLP : volt::nn::Module {
  MLP(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", volt::nn::Linear(in, hidden));
    bn1 = register_module("bn1", volt::nn::BatchNorm1d(hidden));
    drop = register_module("drop", volt::nn::Dropout(0.1));
    fc2 = register_module("fc2", volt::nn::Linear(hidden, out));
  }

  // x: (B, in) -> (B, out) logits
  volt::Tensor forward(const volt::Tensor& x) {
    return fc2->forward(drop->forward(volt::relu(bn1->forward(fc1->forward(x)))));
  }

  volt::nn::Linear fc1{nullptr};
  volt::nn::BatchNorm1d bn1{nullptr};
  volt::nn::Dropout drop{nullptr};
  volt::nn::Linear fc2{nullptr};
};

int main(int argc, char* argv[]) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  const std::string path = argc > 2 ? argv[2] : "mlp.pt";
  volt::manual_seed(0);

  const int64_t n = 512;
  volt::Tensor x = volt::randn({n, 2});
  volt::Tensor y = (x.index({Slice(), 0}) * x.index({Slice(), 1}) > 0).to(volt::kLong);
  std::cout << "data " << x.sizes() << ", labels " << y.sizes() << ", positive " << y.sum().item<int64_t>() << "\n";

  auto model = std::make_shared<MLP>(2, 32, 2);
  for (const auto& p : model->named_parameters()) std::cout << p.key() << " " << p.value().sizes() << "\n";

  volt::optim::Adam optimizer(model->parameters(), volt::optim::AdamOptions(1e-2).weight_decay(1e-4));
  volt::optim::StepLR scheduler(optimizer, /*step_size=*/100, /*gamma=*/0.5);

  float first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    model->train();
    optimizer.zero_grad();
    volt::Tensor loss = volt::nn::functional::cross_entropy(model->forward(x), y);
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

  volt::NoGradGuard no_grad;
  model->eval();
  volt::Tensor logits = model->forward(x);
  const float accuracy = logits.argmax(1).eq(y).to(volt::kFloat).mean().item<float>();
  std::cout << "loss " << first << " -> " << last << ", accuracy " << accuracy << ", largest logit "
            << logits.abs().max().item<float>() << "\n";

  volt::save(model, path);
  auto loaded = std::make_shared<MLP>(2, 32, 2);
  volt::load(loaded, path);
  loaded->eval();
  const bool same = volt::allclose(loaded->forward(x), logits);
  std::cout << "reloaded model " << (same ? "matches" : "differs") << "\n";
  return same && last < first ? 0 : 1;
}
