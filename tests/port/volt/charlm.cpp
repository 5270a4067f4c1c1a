// A small next-character model over padded lines: each position sees its
// character and the one before (two rows of an embedding whose row 0 is the
// padding), and a Sequential with a Functional ReLU predicts the next one.
// Trained with AdamW on a warmup-then-cosine schedule set by hand through
// param_groups(), clipped with error_if_nonfinite, saved and loaded half way
// (the model and the optimizer) and resumed.  The two copies of this program
// (tests/port/libtorch/ and tests/port/volt/) differ only by the renames in
// tests/port/renames.sed.
//
// Usage: charlm STEPS DIR [WEIGHTS]
//   DIR: where the checkpoints of the model and the optimizer are written.
//   WEIGHTS: a raw float32 file with every parameter, in named_parameters()
//   order; without it, the weights are drawn.
// Prints "step S lr R loss L" for every step, "resumed step S loss L" for the
// steps a loaded copy retrains, then "eval loss L" and the padding row's size.
#include <volt/volt.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

using namespace volt::indexing;

const std::vector<std::string> kLines = {
    "the cat sat on the mat",     "a dog ran",         "the sun is hot",        "we like to read books",
    "it is a fine day",           "she sang a song",   "birds fly south",       "the sea is calm at night",
    "he ate an apple",            "rain falls softly", "the old man smiled",    "my tea is cold",
    "stars shine bright above",   "a red fox",         "the wind blew hard",    "you see the hill",
};

const int64_t kPad = 0;  // the padding token: its embedding row stays zero

struct CharLM : volt::nn::Module {
  CharLM(int64_t vocab, int64_t dim, int64_t hidden) {
    emb = register_module("emb", volt::nn::Embedding(volt::nn::EmbeddingOptions(vocab, dim).padding_idx(kPad)));
    mlp = register_module("mlp", volt::nn::Sequential(volt::nn::Linear(2 * dim, hidden),
                                                        volt::nn::Functional(volt::relu),
                                                        volt::nn::Linear(hidden, vocab)));
  }

  // x: (B, T) token ids -> (B, T, vocab) logits for the next token
  volt::Tensor forward(const volt::Tensor& x) {
    const int64_t B = x.size(0);
    // The token before each position, padding before the first.
    volt::Tensor prev = volt::cat({volt::zeros({B, 1}, volt::kLong), x.index({Slice(), Slice(None, -1)})}, 1);
    volt::Tensor h = volt::cat({emb->forward(x), emb->forward(prev)}, -1);  // (B, T, 2 dim)
    return mlp->forward(h);
  }

  volt::nn::Embedding emb{nullptr};
  volt::nn::Sequential mlp{nullptr};
};

// Reads every parameter, in named_parameters() order, from a raw float32 file.
void load_weights(CharLM& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("charlm: cannot open " + path);
  volt::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    std::vector<float> values(static_cast<size_t>(p.value().numel()));
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
    if (!in) throw std::runtime_error("charlm: " + path + " ends before " + p.key());
    p.value().copy_(volt::from_blob(values.data(), p.value().sizes()));
  }
}

// Lines first * B .. first * B + B - 1 (wrapping), as ids, padded to the longest
// line: x the characters but the last, y the characters after each.  -> (x, y), each (B, T)
std::tuple<volt::Tensor, volt::Tensor> get_batch(const std::vector<std::vector<int64_t>>& lines, int64_t first,
                                                   int64_t B) {
  size_t T = 0;
  for (const auto& l : lines) T = std::max(T, l.size() - 1);
  std::vector<int64_t> xs(static_cast<size_t>(B) * T, kPad), ys(static_cast<size_t>(B) * T, kPad);
  for (int64_t b = 0; b < B; ++b) {
    const auto& l = lines[static_cast<size_t>((first * B + b) % static_cast<int64_t>(lines.size()))];
    for (size_t t = 0; t + 1 < l.size(); ++t) {
      xs[b * T + t] = l[t];
      ys[b * T + t] = l[t + 1];
    }
  }
  const int64_t n = static_cast<int64_t>(T);
  return {volt::from_blob(xs.data(), {B, n}, volt::kLong).clone(),
          volt::from_blob(ys.data(), {B, n}, volt::kLong).clone()};
}

// Linear warmup over the first 10 steps, then a half cosine down to a tenth.
double learning_rate(int64_t step, int64_t steps) {
  const double peak = 1e-2, warmup = 10;
  if (step < warmup) return peak * (step + 1) / warmup;
  const double progress = (step - warmup) / std::max(1.0, steps - warmup);
  return peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
}

// One step: the schedule's rate into every group, forward, the smoothed loss
// over the positions that are not padding, backward, clipping, the update.
float train_step(CharLM& model, volt::optim::AdamW& optimizer, const volt::Tensor& x, const volt::Tensor& y,
                 double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
  model.train();
  const int64_t V = model.emb->weight.size(0);
  volt::Tensor logits = model.forward(x);
  volt::Tensor loss = volt::nn::functional::cross_entropy(
      logits.view({-1, V}), y.view({-1}),
      volt::nn::functional::CrossEntropyFuncOptions().ignore_index(kPad).label_smoothing(0.1));
  optimizer.zero_grad();
  loss.backward();
  volt::nn::utils::clip_grad_norm_(model.parameters(), 1.0, 2.0, /*error_if_nonfinite=*/true);
  optimizer.step();
  return loss.item<float>();
}

int main(int argc, char* argv[]) {
  if (argc < 3) {
    std::cerr << "usage: charlm STEPS DIR [WEIGHTS]\n";
    return 2;
  }
  const int64_t steps = std::atoll(argv[1]);
  const std::string dir = argv[2];
  const std::string weights = argc > 3 ? argv[3] : "";
  volt::manual_seed(0);

  std::set<char> chars;
  for (const auto& l : kLines) chars.insert(l.begin(), l.end());
  const std::vector<char> itos(chars.begin(), chars.end());
  std::vector<std::vector<int64_t>> lines;
  for (const auto& l : kLines) {
    std::vector<int64_t> ids;
    for (char ch : l) ids.push_back(1 + std::distance(chars.begin(), chars.find(ch)));  // 0 is the padding
    lines.push_back(ids);
  }
  const int64_t V = static_cast<int64_t>(itos.size()) + 1, B = 4;

  auto model = std::make_shared<CharLM>(V, 16, 32);
  if (!weights.empty()) load_weights(*model, weights);
  volt::optim::AdamW optimizer(model->parameters(), volt::optim::AdamWOptions(1e-2).weight_decay(0.01));
  std::cout << "vocab " << V << ", lines " << lines.size() << ", parameters " << model->parameters().size() << "\n";

  const int64_t half = steps / 2;
  float first = 0, last = 0;
  std::vector<float> tail;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == half) {
      volt::save(model, dir + "/charlm_model.pt");
      volt::save(optimizer, dir + "/charlm_optimizer.pt");
    }
    auto [x, y] = get_batch(lines, step, B);
    const double lr = learning_rate(step, steps);
    last = train_step(*model, optimizer, x, y, lr);
    if (step == 0) first = last;
    if (step >= half) tail.push_back(last);
    std::printf("step %lld lr %.6f loss %.6f\n", static_cast<long long>(step), lr, last);
  }

  // A fresh model and optimizer, loaded from the half-way checkpoints, retrain
  // the second half: the same losses as the run that never stopped.
  auto resumed = std::make_shared<CharLM>(V, 16, 32);
  volt::optim::AdamW resumed_optimizer(resumed->parameters(), volt::optim::AdamWOptions(1e-2).weight_decay(0.01));
  volt::load(resumed, dir + "/charlm_model.pt");
  volt::load(resumed_optimizer, dir + "/charlm_optimizer.pt");
  bool same = true;
  for (int64_t step = half; step < steps; ++step) {
    auto [x, y] = get_batch(lines, step, B);
    const float loss = train_step(*resumed, resumed_optimizer, x, y, learning_rate(step, steps));
    same = same && std::abs(loss - tail[static_cast<size_t>(step - half)]) <= 1e-6f * std::max(1.0f, loss);
    std::printf("resumed step %lld loss %.6f\n", static_cast<long long>(step), loss);
  }

  volt::NoGradGuard no_grad;
  model->eval();
  float eval_loss = 0;
  for (int64_t k = 0; k < 4; ++k) {
    auto [x, y] = get_batch(lines, k, B);
    volt::Tensor logits = model->forward(x).view({-1, V});
    eval_loss += volt::nn::functional::cross_entropy(
                     logits, y.view({-1}), volt::nn::functional::CrossEntropyFuncOptions().ignore_index(kPad))
                     .item<float>() /
                 4;
  }
  const float padding_row = model->emb->weight.index({kPad}).abs().max().item<float>();
  std::printf("eval loss %.6f\n", eval_loss);
  std::printf("padding row %.6f\n", padding_row);
  std::cout << "loss " << first << " -> " << last << ", resumed " << (same ? "same" : "DIFFERENT") << "\n";
  return same && last < first && padding_row == 0 && std::isfinite(eval_loss) ? 0 : 1;
}
