// topk and multinomial (tensor/sampling.h): the choices are made on the host
// from an f64 copy of the input; the draws use the global Philox generator.
#include <volt/tensor/sampling.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace volt {

namespace {

// The input's values as f64 on the host, read without recording a gradient.
std::vector<double> host_values(const Tensor& x) {
  NoGradGuard no_grad;
  return x.detach().to(DType::f64).to(kCPU).contiguous().to_vector<double>();
}

// a before b in topk's order: larger first (NaN the largest), or smaller
// first when !largest; equal values keep their index order.
bool before(double a, double b, int64_t ia, int64_t ib, bool largest) {
  auto greater = [](double u, double v) { return (std::isnan(u) && !std::isnan(v)) || u > v; };
  const bool ab = largest ? greater(a, b) : greater(b, a);
  const bool ba = largest ? greater(b, a) : greater(a, b);
  return ab || (!ba && ia < ib);
}

}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  VOLT_CHECK(x.defined() && x.has_data(), "topk", "needs a tensor with values, got "
                                                      << (x.defined() ? x.meta_str() : std::string("undefined")));
  VOLT_CHECK(x.dim() > 0, "topk", "needs at least one dim, got a 0-d tensor");
  VOLT_CHECK(dim >= -x.dim() && dim < x.dim(), "topk", "dim " << dim << " is out of range for " << x.meta_str());
  if (dim < 0) dim += x.dim();
  const int64_t n = x.size(dim);
  VOLT_CHECK(k >= 0 && k <= n, "topk", "k = " << k << " is out of range: dim " << dim << " has " << n << " elements");
  // Rows along the last dim: (..., n).
  const Tensor rows = x.transpose(dim, -1);
  const std::vector<double> v = host_values(rows);
  const int64_t count = n == 0 ? 0 : static_cast<int64_t>(v.size()) / n;
  std::vector<int64_t> order(static_cast<size_t>(n)), chosen;
  std::vector<double> values;
  chosen.reserve(static_cast<size_t>(count * k));
  values.reserve(static_cast<size_t>(count * k));
  for (int64_t r = 0; r < count; ++r) {
    const double* row = v.data() + r * n;
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return before(row[a], row[b], a, b, largest); });
    for (int64_t j = 0; j < k; ++j) {
      chosen.push_back(order[static_cast<size_t>(j)]);
      values.push_back(row[order[static_cast<size_t>(j)]]);
    }
  }
  Shape shape = rows.sizes();
  shape.back() = k;
  Tensor indices = Tensor::from_vector(chosen, shape).to(x.device());
  Tensor out;
  if (x.requires_grad() && grad_enabled()) {
    // Gathered with ops so that the gradient reaches the chosen elements:
    // (..., k, n) one-hot of the indices picks each value out of its row.
    const Tensor hit = eq(indices.unsqueeze(-1), Tensor::arange(static_cast<double>(n), DType::i64, x.device()));
    out = sum(where(hit, rows.unsqueeze(-2), 0.0), {-1});
  } else {
    out = Tensor::from_vector(values, shape).to(x.dtype()).to(x.device());
  }
  return {out.transpose(dim, -1).contiguous(), indices.transpose(dim, -1).contiguous()};
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  VOLT_CHECK(probs.defined() && probs.has_data(), "multinomial",
             "needs a tensor with values, got " << (probs.defined() ? probs.meta_str() : std::string("undefined")));
  VOLT_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial",
             "probabilities must be 1-D or 2-D, got " << probs.meta_str());
  VOLT_CHECK(is_floating(probs.dtype()), "multinomial", "probabilities must be floating, got " << probs.meta_str());
  const int64_t n = probs.size(-1);
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  VOLT_CHECK(n > 0, "multinomial", "needs at least one category, got " << probs.meta_str());
  VOLT_CHECK(num_samples > 0, "multinomial", "num_samples must be positive, got " << num_samples);
  VOLT_CHECK(replacement || num_samples <= n, "multinomial",
             "cannot draw " << num_samples << " samples from " << n << " categories without replacement");
  const std::vector<double> p = host_values(probs);
  const PhiloxState state = rng_reserve(static_cast<uint64_t>(rows * num_samples));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(rows * num_samples));
  std::vector<double> weight(static_cast<size_t>(n)), cumulative(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t nonzero = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double w = p[static_cast<size_t>(r * n + j)];
      VOLT_CHECK(std::isfinite(w) && w >= 0, "multinomial",
                 "row " << r << " has weight " << w << " at " << j << "; weights must be finite and >= 0");
      weight[static_cast<size_t>(j)] = w;
      nonzero += w > 0;
    }
    VOLT_CHECK(nonzero > 0, "multinomial", "row " << r << " sums to 0");
    VOLT_CHECK(replacement || num_samples <= nonzero, "multinomial",
               "row " << r << " has " << nonzero << " non-zero weights, too few for " << num_samples
                      << " samples without replacement");
    for (int64_t s = 0; s < num_samples; ++s) {
      std::partial_sum(weight.begin(), weight.end(), cumulative.begin());
      const double u = philox_uniform_f64(state.seed, state.offset, static_cast<uint64_t>(r * num_samples + s));
      const double target = u * cumulative.back();
      // The first category whose cumulative weight exceeds the target (never a
      // zero-weight one); rounding at the top end falls to the last non-zero.
      auto at = std::upper_bound(cumulative.begin(), cumulative.end(), target);
      int64_t j = at - cumulative.begin();
      if (j == n) {
        j = n - 1;
        while (weight[static_cast<size_t>(j)] == 0) --j;
      }
      out.push_back(j);
      if (!replacement) weight[static_cast<size_t>(j)] = 0;
    }
  }
  Shape shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  return Tensor::from_vector(out, shape).to(probs.device());
}

}  // namespace volt
