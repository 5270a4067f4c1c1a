// The options of cross_entropy and nll_loss, as PyTorch has them.
//
//   Tensor loss = cross_entropy(logits, target, {.reduction = Reduction::Sum, .ignore_index = 0,
//                                                .label_smoothing = 0.1});
//
// For logits x (N, C), targets t (N) and smoothing e, row i's loss is
//   (1 - e) * -logp[i, t_i] + e/C * sum_j -logp[i, j],   logp = log_softmax(x, 1),
// and 0 where t_i == ignore_index.  Reductions: None gives the N row losses,
// Sum their sum, Mean their sum divided by the number of rows not ignored
// (NaN when every row is).  Targets other than ignore_index must lie in [0, C).
#pragma once
#include <cstdint>
#include <string>

namespace volt {

struct Attrs;

enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1]
};

// "none", "mean", "sum" (as PyTorch spells them); anything else is an error naming `op`.
Reduction reduction_from_string(const std::string& s, const char* op = "cross_entropy");
const char* reduction_name(Reduction r);

// How a call carries them: Attrs::ints = {reduction, ignore_index}, Attrs::a =
// label_smoothing; a call without them has the defaults.
void set_cross_entropy_attrs(Attrs& at, const CrossEntropyOptions& o);
CrossEntropyOptions cross_entropy_options(const Attrs& at);
bool is_default(const CrossEntropyOptions& o);

}  // namespace volt
