// Chapter 1, the Tensor (docs/tutorial/01_tensor.md): shapes, dtypes,
// broadcasting, views that share memory, reductions, and the errors volt gives.
#include <iostream>

#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  Tensor a = Tensor::arange(6, DType::f32).reshape({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "shape " << shape_str(a.sizes()) << ", strides " << shape_str(a.strides()) << ", dtype "
            << dtype_name(a.dtype()) << ", device " << a.device().str() << "\n\n";

  Tensor b = Tensor::from_vector<float>({10, 20, 30});
  std::cout << "a + b (b broadcasts over the rows) = " << a + b << "\n\n";

  Tensor t = a.t();  // a view: same storage, other strides
  std::cout << "a.t(): shape " << shape_str(t.sizes()) << ", strides " << shape_str(t.strides())
            << ", contiguous " << std::boolalpha << t.is_contiguous() << "\n";
  t.select(0, 0).fill_(-1.0);  // writes through to a
  std::cout << "after a.t().select(0, 0).fill_(-1): a = " << a << "\n\n";

  std::cout << "a.sum({1}) = " << a.sum({1}) << "\n";
  std::cout << "a.argmax(1) = " << a.argmax(1) << "\n";
  std::cout << "(a > 0.0) = " << (a > 0.0) << "\n";
  std::cout << "randn({2, 2}) with seed 0 = " << Tensor::randn({2, 2}) << "\n\n";

  try {
    matmul(Tensor::ones({8, 784}), Tensor::ones({28, 784}));
  } catch (const Error& e) {
    std::cout << "a bad matmul: " << e.what() << "\n";
  }
  return 0;
}
