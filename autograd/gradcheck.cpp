#include <volt/autograd/gradcheck.h>

#include <cmath>
#include <limits>
#include <sstream>

#include <volt/tensor/ops.h>

namespace volt::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    Tensor x = t.to(DType::f64).contiguous().clone();
    x.requires_grad_(true);
    xs.push_back(x);
  }
  Tensor out = f(xs);
  // A fixed cotangent with distinct entries, so every output element matters.
  Tensor v = add(mul(Tensor::arange(static_cast<double>(out.numel()), DType::f64), 0.37), 0.5)
                 .reshape(out.sizes());
  Tensor scalar_out = sum(mul(out, v));
  scalar_out.backward();

  GradcheckResult r;
  for (size_t k = 0; k < xs.size(); ++k) {
    Tensor analytic = xs[k].grad();
    std::vector<double> an = analytic.defined() ? analytic.to_vector<double>()
                                                : std::vector<double>(xs[k].numel(), 0.0);
    double* p = xs[k].data_ptr<double>();
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      double orig = p[i];
      double plus, minus;
      {
        NoGradGuard ng;
        p[i] = orig + eps;
        plus = sum(mul(f(xs), v)).item<double>();
        p[i] = orig - eps;
        minus = sum(mul(f(xs), v)).item<double>();
        p[i] = orig;
      }
      double numeric = (plus - minus) / (2 * eps);
      double err = std::fabs(numeric - an[i]);
      // A NaN on either side is a failure (NaN compares false with any bound).
      if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (!(err <= atol + rtol * std::fabs(numeric)) && r.ok) {
        r.ok = false;
        std::ostringstream os;
        os << "input " << k << " element " << i << ": analytic " << an[i] << " vs numeric " << numeric;
        r.message = os.str();
      }
    }
  }
  return r;
}

}  // namespace volt::autograd
