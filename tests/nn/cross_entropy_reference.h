// Cross-entropy computed by plain loops in f64, following PyTorch's documented
// formulas for class-index targets (torch.nn.CrossEntropyLoss):
//   l_i = (1 - e) * -logp[i, t_i] + e/C * sum_j -logp[i, j],  0 if t_i == ignore_index
//   mean: sum_i l_i / #{i : t_i != ignore_index};  sum: sum_i l_i;  none: (l_i)
// Shared by the CPU, lazy and CUDA tests; uses nothing of volt's kernels.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <volt/tensor/cross_entropy.h>

namespace volt::testing {

// x: n * c row-major logits.  Returns the n row losses (None) or one value.
inline std::vector<double> reference_ce(const std::vector<double>& x, int64_t n, int64_t c,
                                        const std::vector<int64_t>& t, const CrossEntropyOptions& o) {
  std::vector<double> rows(static_cast<size_t>(n), 0.0);
  double counted = 0, total = 0;
  const double e = o.label_smoothing;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == o.ignore_index) continue;
    counted += 1;
    const double* r = x.data() + i * c;
    double m = r[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, r[j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(r[j] - m);
    const double lse = m + std::log(s);
    double smooth = 0;  // sum_j -logp[i, j]
    for (int64_t j = 0; j < c; ++j) smooth += lse - r[j];
    rows[i] = (1 - e) * (lse - r[t[i]]) + e / static_cast<double>(c) * smooth;
    total += rows[i];
  }
  if (o.reduction == Reduction::None) return rows;
  if (o.reduction == Reduction::Sum) return {total};
  return {total / counted};
}

// sum_i w_i l_i for None, w_0 * loss otherwise: the scalar whose gradient the tests compare.
inline double reference_ce_objective(const std::vector<double>& x, int64_t n, int64_t c,
                                     const std::vector<int64_t>& t, const CrossEntropyOptions& o,
                                     const std::vector<double>& w) {
  const std::vector<double> l = reference_ce(x, n, c, t, o);
  if (l.size() == 1 && o.reduction != Reduction::None) return w[0] * l[0];
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += w[i] * l[i];
  return s;
}

struct CeCase {
  CrossEntropyOptions options;
  std::string label() const {
    return std::string("reduction=") + reduction_name(options.reduction) +
           " ignore_index=" + std::to_string(options.ignore_index) +
           " label_smoothing=" + std::to_string(options.label_smoothing);
  }
};

// Every reduction, with ignore_index unused (-100), a real class (1) and an
// out-of-range marker (-1), with and without label smoothing.
inline std::vector<CeCase> ce_cases() {
  std::vector<CeCase> r;
  for (Reduction red : {Reduction::None, Reduction::Mean, Reduction::Sum})
    for (int64_t ignore : {int64_t{-100}, int64_t{1}, int64_t{-1}})
      for (double e : {0.0, 0.2}) r.push_back({{red, ignore, e}});
  return r;
}

// Targets for n = 6 rows, c >= 5 classes; with ignore_index -1 two rows carry it.
inline std::vector<int64_t> ce_targets(int64_t ignore_index, int64_t c) {
  (void)c;
  std::vector<int64_t> t{0, 1, 3, 4, 2, 1};
  if (ignore_index == -1) t[2] = t[5] = -1;
  return t;
}

}  // namespace volt::testing
