// Finite-difference gradient checking in f64, the one helper every VJP test uses.
//
//   auto f = [](const std::vector<Tensor>& x) { return (x[0] * x[1]).sum(); };
//   CHECK(gradcheck(f, {a, b}).ok);
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::autograd {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // names the input and element of the worst mismatch
};

// Checks d(sum(f(x) * v))/dx for a fixed random v against central differences.
// Inputs are converted to f64 and made to require grad.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-3);

}  // namespace volt::autograd
