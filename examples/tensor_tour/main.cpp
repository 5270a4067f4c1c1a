// A short tour of volt's tensors: creation, broadcasting, views, reductions, matmul.
#include <iostream>

#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using volt::Tensor;

int main() {
  volt::manual_seed(0);
  std::cout << "volt tensor tour\n\n";

  Tensor a = Tensor::arange(6, volt::DType::f32).reshape({2, 3});
  std::cout << "a = arange(6).reshape({2, 3})\n" << a << "\n\n";

  Tensor b = Tensor::from_vector<float>({10, 20, 30});
  std::cout << "b = " << b << "\n";
  std::cout << "a + b   (b broadcasts over the rows)\n" << a + b << "\n\n";

  Tensor at = a.t();
  std::cout << "a.t() is a view: shape " << volt::shape_str(at.sizes()) << ", strides "
            << volt::shape_str(at.strides()) << ", contiguous " << std::boolalpha
            << at.is_contiguous() << "\n" << at << "\n\n";

  a.select(0, 1).fill_(-1.0);
  std::cout << "a.select(0, 1).fill_(-1) writes through to a\n" << a << "\n\n";

  std::cout << "sum over dim 1: " << a.sum({1}) << "\n";
  std::cout << "mean of all:    " << a.mean() << "\n";
  std::cout << "argmax dim 1:   " << a.argmax(1) << "\n";
  std::cout << "a > 0:          " << (a > 0.0) << "\n\n";

  Tensor w = Tensor::randn({3, 2});
  std::cout << "w = randn({3, 2}) from the Philox generator, seed 0\n" << w << "\n";
  std::cout << "a.matmul(w)\n" << a.matmul(w) << "\n\n";

  std::cout << "a.to(f64) * 0.5\n" << a.to(volt::DType::f64) * 0.5 << "\n\n";

  try {
    volt::matmul(Tensor::ones({8, 784}), Tensor::ones({28, 784}));
  } catch (const volt::Error& e) {
    std::cout << "a bad matmul says: " << e.what() << "\n";
  }
  return 0;
}
