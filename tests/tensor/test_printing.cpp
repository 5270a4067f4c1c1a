// Printing matches PyTorch's repr (dtype names are volt's: dtype=f64).
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include <volt/tensor/ops.h>

using namespace volt;

namespace {
std::string str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  CHECK(os.str() == to_string(t));
  return os.str();
}
}  // namespace

TEST_CASE("floats: integer-valued, fixed with 4 decimals, scientific") {
  CHECK(str(Tensor::from_vector<float>({1, 2, 3})) == "tensor([1., 2., 3.])");
  CHECK(str(Tensor::from_vector<float>({1.5f, 2, 3, 4}, {2, 2})) ==
        "tensor([[1.5000, 2.0000],\n"
        "        [3.0000, 4.0000]])");
  CHECK(str(Tensor::from_vector<float>({-1.5f, 2})) == "tensor([-1.5000,  2.0000])");
  CHECK(str(Tensor::from_vector<float>({-1, 10, 3})) == "tensor([-1., 10.,  3.])");
  CHECK(str(Tensor::from_vector<float>({1e-5f, 1})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(str(Tensor::from_vector<float>({1, 10000})) == "tensor([1.0000e+00, 1.0000e+04])");
  CHECK(str(Tensor::from_vector<float>({1, 1000})) == "tensor([   1., 1000.])");
  CHECK(str(Tensor::from_vector<double>({1e9, 2})) == "tensor([1.0000e+09, 2.0000e+00], dtype=f64)");
  CHECK(str(Tensor::from_vector<float>({0, 0})) == "tensor([0., 0.])");
  CHECK(str(Tensor::from_vector<float>({0, 0.5f})) == "tensor([0.0000, 0.5000])");
  CHECK(str(Tensor::from_vector<double>({1.5, 2})) == "tensor([1.5000, 2.0000], dtype=f64)");
}

TEST_CASE("non-finite values do not widen the columns") {
  CHECK(str(Tensor::from_vector<float>({1.5f, NAN, INFINITY})) == "tensor([1.5000,    nan,    inf])");
  CHECK(str(Tensor::from_vector<float>({1, -INFINITY})) == "tensor([1., -inf])");
  CHECK(str(Tensor::from_vector<float>({NAN})) == "tensor([nan])");
}

TEST_CASE("integers and bools") {
  CHECK(str(Tensor::from_vector<int64_t>({1, 2, 3})) == "tensor([1, 2, 3])");
  CHECK(str(Tensor::from_vector<int64_t>({-1, 10, 3})) == "tensor([-1, 10,  3])");
  CHECK(str(Tensor::from_vector<int32_t>({1, 2, 3})) == "tensor([1, 2, 3], dtype=i32)");
  CHECK(str(Tensor::from_vector<uint8_t>({0, 255})) == "tensor([  0, 255], dtype=u8)");
  CHECK(str(Tensor::from_vector<bool>({true, false})) == "tensor([ True, False])");
  CHECK(str(Tensor::from_vector<bool>({true, true})) == "tensor([True, True])");
}

TEST_CASE("zero-dim tensors") {
  CHECK(str(Tensor::scalar_tensor(3.0, DType::f32)) == "tensor(3.)");
  CHECK(str(Tensor::scalar_tensor(2.5, DType::f32)) == "tensor(2.5000)");
  CHECK(str(Tensor::scalar_tensor(0.5, DType::f64)) == "tensor(0.5000, dtype=f64)");
  CHECK(str(Tensor::scalar_tensor(7, DType::i64)) == "tensor(7)");
  CHECK(str(Tensor::scalar_tensor(true, DType::b8)) == "tensor(True)");
  CHECK(str(Tensor::from_vector<float>({1, 2, 3}).sum()) == "tensor(6.)");
}

TEST_CASE("higher dims and non-contiguous tensors") {
  CHECK(str(Tensor::arange(8).reshape({2, 2, 2})) ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]])");
  CHECK(str(Tensor::arange(6, DType::f32).reshape({2, 3}).t()) ==
        "tensor([[0., 3.],\n"
        "        [1., 4.],\n"
        "        [2., 5.]])");
  CHECK(str(Tensor::ones({1, 1, 1})) == "tensor([[[1.]]])");
}

TEST_CASE("empty tensors") {
  CHECK(str(Tensor::zeros({0})) == "tensor([])");
  CHECK(str(Tensor::zeros({0}, DType::f64)) == "tensor([], dtype=f64)");
  CHECK(str(Tensor::zeros({0}, DType::i64)) == "tensor([], dtype=i64)");
  CHECK(str(Tensor::zeros({0, 3})) == "tensor([], size=(0, 3))");
  CHECK(str(Tensor::zeros({2, 0}, DType::i32)) == "tensor([], size=(2, 0), dtype=i32)");
  CHECK(str(Tensor()) == "tensor(undefined)");
}

TEST_CASE("long rows wrap at 80 columns") {
  CHECK(str(Tensor::arange(30)) ==
        "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
        "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
  CHECK(str(Tensor::ones({2, 20})) ==
        "tensor([[1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.,\n"
        "         1., 1.],\n"
        "        [1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.,\n"
        "         1., 1.]])");
  // The dtype goes on its own line when it would not fit on the last one.
  CHECK(str(mul(Tensor::arange(12, DType::f64), 0.5)) ==
        "tensor([0.0000, 0.5000, 1.0000, 1.5000, 2.0000, 2.5000, 3.0000, 3.5000, 4.0000,\n"
        "        4.5000, 5.0000, 5.5000], dtype=f64)");
  CHECK(str(mul(Tensor::arange(9, DType::f64), 0.5)) ==
        "tensor([0.0000, 0.5000, 1.0000, 1.5000, 2.0000, 2.5000, 3.0000, 3.5000, 4.0000],\n"
        "       dtype=f64)");
}

TEST_CASE("more than 1000 elements are summarised with ...") {
  CHECK(str(Tensor::arange(2000)) == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(str(Tensor::arange(1000)).find("...") == std::string::npos);
  CHECK(str(Tensor::zeros({100, 100}, DType::i64)) ==
        "tensor([[0, 0, 0,  ..., 0, 0, 0],\n"
        "        [0, 0, 0,  ..., 0, 0, 0],\n"
        "        [0, 0, 0,  ..., 0, 0, 0],\n"
        "        ...,\n"
        "        [0, 0, 0,  ..., 0, 0, 0],\n"
        "        [0, 0, 0,  ..., 0, 0, 0],\n"
        "        [0, 0, 0,  ..., 0, 0, 0]])");
  // The format is chosen from the elements shown: 0, 1, 2, 1997.. spans > 1000x.
  CHECK(str(Tensor::arange(2000, DType::f32)) ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03])");
}
