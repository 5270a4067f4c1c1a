// A program of someone else's that uses an installed (or vendored) volt: it must
// compile from <volt/volt.h> alone, with its own data/dataset.h beside it; the
// training utilities are included as <volt/utils/...>.
#include <volt/utils/curves.h>
#include <volt/utils/json_log.h>
#include <volt/utils/progress.h>
#include <volt/utils/summary.h>
#include <volt/volt.h>

#include <iostream>

#include "data/dataset.h"  // the application's own header of that name

int main() {
  using namespace volt;
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(4, std::vector<int64_t>{16, 3});
  nn::Adam opt(net->parameters(), {.lr = 0.05});
  Tensor x = randn({32, 4});
  Tensor y = app::labels_of(x);
  const utils::ModelSummary summary = utils::summary(*net, x);
  if (summary.layers.front().output_shape != std::vector<int64_t>{32, 3}) return 1;
  utils::Progress bar("train", 60);  // drawn only where standard error is a terminal
  utils::Curves curves;
  auto jnet = jit::jit(net);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = nn::functional::cross_entropy(jnet(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
    bar.update(step + 1, last);
    curves.loss.push_back({double(step), double(loss.item<float>())});
  }
  const std::string record = utils::JsonLog::format("step", 60, 0.0, {{"loss", double(last)}});
  if (record.find("\"type\":\"step\"") == std::string::npos) return 1;
  if (utils::svg(curves).find("training loss") == std::string::npos) return 1;
  std::cout << "consumer: loss " << first << " -> " << last << ", dtype " << x.dtype() << ", device "
            << x.device() << ", " << summary.layers.front().params << " parameters\n";
  return last < 0.5 * first ? 0 : 1;  // it learned: the package works end to end
}
