#include <volt/nn/mlp.h>

#include <volt/nn/activation.h>
#include <volt/nn/linear.h>

namespace volt::nn {

MLP::MLP(int64_t in_channels, const std::vector<int64_t>& hidden_channels, bool bias,
         double dropout)
    : Sequential("MLP") {
  VOLT_CHECK(!hidden_channels.empty(), "MLP", "hidden_channels must not be empty");
  int64_t in = in_channels;
  for (size_t i = 0; i < hidden_channels.size(); ++i) {
    push_back(std::make_shared<Linear>(in, hidden_channels[i], bias));
    if (i + 1 < hidden_channels.size()) push_back(std::make_shared<ReLU>());
    push_back(std::make_shared<Dropout>(dropout));
    in = hidden_channels[i];
  }
}

}  // namespace volt::nn
