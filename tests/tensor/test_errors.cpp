// Bad inputs raise volt::Error (a std::runtime_error) whose message names the
// op and what it expected.
#include <doctest/doctest.h>

#include <stdexcept>
#include <type_traits>

#include <volt/tensor/ops.h>

using namespace volt;

TEST_CASE("volt::Error is a std::runtime_error") {
  static_assert(std::is_base_of_v<std::runtime_error, volt::Error>);
  CHECK_THROWS_AS(Tensor::zeros({2}).item<float>(), std::runtime_error);
}

TEST_CASE("matmul shape mismatch") {
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({8, 784}), Tensor::zeros({28, 784})),
                       doctest::Contains("matmul: shapes [8, 784] and [28, 784] cannot be multiplied (784 != 28)"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({3}), Tensor::zeros({4})),
                       doctest::Contains("matmul: shapes [3] and [4] cannot be multiplied (3 != 4)"), volt::Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})),
                       doctest::Contains("cannot be broadcast"), volt::Error);
}

TEST_CASE("broadcast failure names the op and both shapes") {
  CHECK_THROWS_WITH_AS(add(Tensor::zeros({2, 3}), Tensor::zeros({4})),
                       doctest::Contains("add: shapes [2, 3] and [4] cannot be broadcast"), volt::Error);
  CHECK_THROWS_WITH_AS(where(Tensor::zeros({2}, DType::b8), Tensor::zeros({3}), 0.0),
                       doctest::Contains("where: shapes"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({3}).add_(Tensor::zeros({2, 3})), doctest::Contains("expand"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2, 3}).expand({2, 4}),
                       doctest::Contains("expand: the expanded size 4 must match the existing size 3"), volt::Error);
}

TEST_CASE("out-of-range dims") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(sum(x, {2}), doctest::Contains("sum: dim 2 out of range for a tensor of 2 dims"), volt::Error);
  CHECK_THROWS_WITH_AS(x.transpose(0, -3), doctest::Contains("transpose: dim -3 out of range"), volt::Error);
  CHECK_THROWS_WITH_AS(x.unsqueeze(4), doctest::Contains("unsqueeze: dim 4 out of range"), volt::Error);
  CHECK_THROWS_WITH_AS(softmax(x, 2), doctest::Contains("softmax: dim 2 out of range"), volt::Error);
  CHECK_THROWS_WITH_AS(argmax(x, -3), doctest::Contains("argmax: dim -3 out of range"), volt::Error);
  CHECK_THROWS_WITH_AS(x.narrow(1, 2, 2), doctest::Contains("narrow: range [2, 4) is out of bounds for dim 1 of size 3"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::scalar_tensor(1.0, DType::f32).select(0, 0), doctest::Contains("select"),
                       volt::Error);
}

TEST_CASE("bad view and reshape") {
  Tensor x = Tensor::zeros({3, 4});
  CHECK_THROWS_WITH_AS(x.t().view({12}), doctest::Contains("view: cannot view a tensor cpu f32[4, 3] with strides [1, 4] as [12] without a copy"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(x.reshape({5, 2}), doctest::Contains("reshape: shape [5, 2] is invalid for input of size 12"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(x.view({-1, 5}), doctest::Contains("view: shape [-1, 5] is invalid for input of size 12"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(x.view({-1, -1}), doctest::Contains("only one dimension can be -1"), volt::Error);
}

TEST_CASE("select index out of range") {
  Tensor x = Tensor::zeros({3, 4});
  CHECK_THROWS_WITH_AS(x.select(0, 3), doctest::Contains("select: index 3 is out of range for dim 0 of size 3"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(x[-4], doctest::Contains("select: index -4 is out of range"), volt::Error);
  CHECK_NOTHROW(x[-3]);
}

TEST_CASE("item on a tensor with more than one element") {
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}).item<float>(),
                       doctest::Contains("item: expected a tensor with one element, got cpu f32[2]"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({0}).item<float>(), doctest::Contains("item"), volt::Error);
}

TEST_CASE("dtype mismatch in data_ptr") {
  Tensor x = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(x.data_ptr<double>(), doctest::Contains("data_ptr: tensor has dtype f32, asked for f64"),
                       volt::Error);
  CHECK(x.data_ptr<float>() != nullptr);
}

TEST_CASE("where with a non-bool condition") {
  CHECK_THROWS_WITH_AS(where(Tensor::ones({2}), Tensor::ones({2}), 0.0),
                       doctest::Contains("where: condition must be b8, got f32"), volt::Error);
  CHECK_THROWS_WITH_AS(where(Tensor::ones({2}, DType::i64), 1.0, 0.0), doctest::Contains("got i64"), volt::Error);
}

TEST_CASE("other invalid arguments") {
  CHECK_THROWS_WITH_AS(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                       doctest::Contains("from_vector: 3 values cannot fill shape [2, 2]"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor().sizes(), doctest::Contains("undefined tensor"), volt::Error);
  CHECK_THROWS_WITH_AS(exp(Tensor()), doctest::Contains("exp: got an undefined tensor"), volt::Error);
  CHECK_THROWS_WITH_AS(neg(Tensor::ones({2}, DType::b8)), doctest::Contains("neg: is not defined for b8"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(sub(Tensor::ones({2}, DType::b8), Tensor::ones({2}, DType::b8)),
                       doctest::Contains("sub: is not defined for b8 operands"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::ones({2}, DType::i32).requires_grad_(),
                       doctest::Contains("only floating tensors can require grad, got i32"), volt::Error);
  CHECK_THROWS_WITH_AS(dropout(Tensor::ones({2}), 1.5, true), doctest::Contains("dropout"), volt::Error);
  CHECK_THROWS_WITH_AS(nll_loss(Tensor::zeros({2, 3}), Tensor::from_vector<int64_t>({0, 3})),
                       doctest::Contains("nll_loss: target values must lie in [0, 3)"), volt::Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}).copy_(Tensor::zeros({3})), doctest::Contains("expand"), volt::Error);
}
