// A model with two heads over a table of house sales: the price, a regression
// trained with SmoothL1Loss (a few prices were recorded wrongly), and whether
// the house sold within a month, a binary label trained with BCEWithLogitsLoss
// and a pos_weight for the rarer class.  The numeric columns are stacked,
// standardised with the training rows' statistics and joined to a one-hot
// category; each epoch walks the training rows in minibatches drawn by
// randperm; RMSprop with momentum.  The test rows are scored under
// NoGradGuard (mean squared error, accuracy), the model is saved, loaded and
// scored again.  The two copies of this program (tests/port/libtorch/ and
// tests/port/volt/) differ only by the renames in tests/port/renames.sed.
//
// Usage: tabular EPOCHS DIR [WEIGHTS [DROPOUT [SHUFFLE]]]
//   DIR: where the model is saved.  WEIGHTS: a raw float32 file with every
//   parameter, in named_parameters() order ("-": drawn).  DROPOUT: the
//   dropout probability (0.2).  SHUFFLE: 1 (the default) draws each epoch's
//   order with randperm, 0 keeps the rows' order.
// Prints "step S loss L" for every minibatch, "epoch E test mse M accuracy A"
// after every epoch, then "reloaded ...".
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace torch::indexing;

const int64_t kRows = 240, kTrain = 192, kBatch = 32, kCategories = 3;

struct Table {
  torch::Tensor features;  // (rows, 4 + kCategories)
  torch::Tensor price;     // (rows) in hundreds of thousands
  torch::Tensor sold;      // (rows) 1 when sold within a month, else 0
};

// The table's rows come from fixed formulas here; a real program reads them
// from a file into the same vectors.
Table make_table() {
  std::vector<float> area(kRows), rooms(kRows), age(kRows), distance(kRows), price(kRows), sold(kRows);
  std::vector<int64_t> category(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    const double a = 60 + 90 * (0.5 + 0.5 * std::sin(0.731 * i)), r = 1 + (i * 7) % 5, g = (i * 13) % 50,
                 d = 0.5 + 9.5 * (0.5 + 0.5 * std::cos(1.37 * i + 0.4));
    const int64_t c = (i * 11) % kCategories;
    const double p = 0.9 * a + 12 * r - 0.8 * g - 6 * d + 30 * c + 8 * std::sin(2.3 * i);
    area[i] = static_cast<float>(a);
    rooms[i] = static_cast<float>(r);
    age[i] = static_cast<float>(g);
    distance[i] = static_cast<float>(d);
    category[i] = c;
    price[i] = static_cast<float>(p / 100);
    sold[i] = d < 3.5 || (c == 2 && g < 20) ? 1.0f : 0.0f;
  }
  auto column = [](std::vector<float>& v) { return torch::from_blob(v.data(), {kRows}).clone(); };
  torch::Tensor numeric = torch::stack({column(area), column(rooms), column(age), column(distance)}, 1);
  // Standardised with the training rows' mean and (population) deviation.
  torch::Tensor train = numeric.index({Slice(None, kTrain)});
  torch::Tensor mean = train.mean(0);
  torch::Tensor deviation = (train - mean).pow(2).mean(0).sqrt();
  numeric = (numeric - mean) / deviation;
  torch::Tensor categories = torch::from_blob(category.data(), {kRows}, torch::kLong).clone();
  torch::Tensor one_hot = categories.unsqueeze(1).eq(torch::arange(kCategories)).to(torch::kFloat);
  Table table{torch::cat({numeric, one_hot}, 1), column(price), column(sold)};
  // Every 24th training sale was recorded at three times its price.
  for (int64_t i = 5; i < kTrain; i += 24) table.price.index_put_({i}, table.price.index({i}) * 3);
  return table;
}

struct TabularNet : torch::nn::Module {
  TabularNet(int64_t in, int64_t hidden, double dropout) {
    body = register_module("body", torch::nn::Sequential(torch::nn::Linear(in, hidden), torch::nn::BatchNorm1d(hidden),
                                                          torch::nn::ReLU(), torch::nn::Dropout(dropout),
                                                          torch::nn::Linear(hidden, hidden), torch::nn::ReLU()));
    head = register_module("head", torch::nn::Linear(hidden, 2));
  }

  // x: (B, in) -> (B, 2): the price and the logit of a quick sale
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(body->forward(x)); }

  torch::nn::Sequential body{nullptr};
  torch::nn::Linear head{nullptr};
};

// Reads every parameter, in named_parameters() order, from a raw float32 file.
void load_weights(TabularNet& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("tabular: cannot open " + path);
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    std::vector<float> values(static_cast<size_t>(p.value().numel()));
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
    if (!in) throw std::runtime_error("tabular: " + path + " ends before " + p.key());
    p.value().copy_(torch::from_blob(values.data(), p.value().sizes()));
  }
}

// The test rows' mean squared error of the price and the accuracy of the label.
std::pair<float, float> score(TabularNet& model, const Table& table) {
  torch::NoGradGuard no_grad;
  model.eval();
  torch::Tensor out = model.forward(table.features.index({Slice(kTrain, None)}));
  torch::Tensor price = table.price.index({Slice(kTrain, None)}), sold = table.sold.index({Slice(kTrain, None)});
  const float mse = torch::nn::functional::mse_loss(out.index({Slice(), 0}), price).item<float>();
  torch::Tensor guess = out.index({Slice(), 1}).gt(0).to(torch::kFloat);
  const int64_t right = guess.eq(sold).sum().item<int64_t>();
  return {mse, static_cast<float>(right) / static_cast<float>(kRows - kTrain)};
}

int main(int argc, char* argv[]) {
  if (argc < 3) {
    std::cerr << "usage: tabular EPOCHS DIR [WEIGHTS [DROPOUT [SHUFFLE]]]\n";
    return 2;
  }
  const int64_t epochs = std::atoll(argv[1]);
  const std::string dir = argv[2];
  const std::string weights = argc > 3 ? argv[3] : "-";
  const double dropout = argc > 4 ? std::atof(argv[4]) : 0.2;
  const bool shuffle = argc > 5 ? std::atoi(argv[5]) != 0 : true;
  torch::manual_seed(0);

  const Table table = make_table();
  const int64_t in = table.features.size(1);
  const float quick = table.sold.index({Slice(None, kTrain)}).sum().item<float>();
  std::cout << "features " << table.features.sizes() << ", sold quickly " << quick << " of " << kTrain << "\n";

  auto model = std::make_shared<TabularNet>(in, 32, dropout);
  if (weights != "-") load_weights(*model, weights);
  torch::optim::RMSprop optimizer(model->parameters(),
                                  torch::optim::RMSpropOptions(3e-3).alpha(0.9).momentum(0.5).weight_decay(1e-4));
  torch::nn::SmoothL1Loss price_loss(torch::nn::SmoothL1LossOptions().beta(0.5));
  // The rarer class weighs as much as the other in all.
  torch::nn::BCEWithLogitsLoss sold_loss(
      torch::nn::BCEWithLogitsLossOptions().pos_weight(torch::full({1}, (kTrain - quick) / quick)));

  int64_t step = 0;
  float first = 0, last = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    torch::Tensor order = shuffle ? torch::randperm(kTrain) : torch::arange(kTrain);
    for (int64_t start = 0; start < kTrain; start += kBatch, ++step) {
      torch::Tensor rows = order.index({Slice(start, start + kBatch)});
      torch::Tensor x = table.features.index({rows});
      torch::Tensor out = model->forward(x);
      torch::Tensor loss = price_loss(out.index({Slice(), 0}), table.price.index({rows})) +
                           sold_loss(out.index({Slice(), 1}), table.sold.index({rows}));
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      last = loss.item<float>();
      if (step == 0) first = last;
      std::printf("step %lld loss %.6f\n", static_cast<long long>(step), last);
    }
    const auto [mse, accuracy] = score(*model, table);
    std::printf("epoch %lld test mse %.6f accuracy %.6f\n", static_cast<long long>(epoch), mse, accuracy);
  }

  const auto [mse, accuracy] = score(*model, table);
  torch::save(model, dir + "/tabular_model.pt");
  auto loaded = std::make_shared<TabularNet>(in, 32, dropout);
  torch::load(loaded, dir + "/tabular_model.pt");
  const auto [loaded_mse, loaded_accuracy] = score(*loaded, table);
  const bool same = loaded_mse == mse && loaded_accuracy == accuracy;
  std::cout << "loss " << first << " -> " << last << ", reloaded " << (same ? "same" : "DIFFERENT") << "\n";
  return same && last < first && std::isfinite(mse) ? 0 : 1;
}
