// meta_like_first_argument (tensor/custom_op.h): the metadata of an op whose
// output is shaped, typed and placed as its first argument, and the error
// naming the op when that argument is not a tensor.
#include <doctest/doctest.h>

#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>

using namespace volt;

TEST_CASE("meta_like_first_argument: the first argument's shape, dtype and device; else an error naming the op") {
  CustomOpDef::MetaFn meta = meta_like_first_argument("check_rows");
  const std::vector<TensorMeta> m = meta({Value(Tensor::zeros({2, 0, 3}, DType::f64)), Value(Scalar(int64_t{4}))});
  REQUIRE(m.size() == 1);
  CHECK(m[0].sizes == Shape{2, 0, 3});
  CHECK(m[0].dtype == DType::f64);
  CHECK(m[0].device == kCPU);
  CHECK(meta({Value(Tensor::zeros({5}, DType::i64)), Value(Tensor::zeros({2}))})[0].dtype == DType::i64);
  CHECK_THROWS_WITH_AS(meta({Value(Scalar(1.0))}), doctest::Contains("check_rows: expected a defined tensor as the first"),
                       Error);
  CHECK_THROWS_WITH_AS(meta({}), doctest::Contains("check_rows: expected a defined tensor"), Error);
  CHECK_THROWS_WITH_AS(meta({Value(Tensor())}), doctest::Contains("check_rows: expected a defined tensor"), Error);
}

TEST_CASE("a custom op declared with meta_like_first_argument runs eagerly with its output's metadata") {
  CustomOpDef def;
  def.name = "twice_like_first";
  def.meta = meta_like_first_argument(def.name);
  def.kernel = [](const std::vector<Value>& a) { return std::vector<Tensor>{a[0].tensor * 2.0}; };
  const int64_t id = register_custom_op(std::move(def));
  CHECK(custom_op(id).meta({Value(Tensor::ones({3, 2}))})[0].sizes == Shape{3, 2});
  CHECK(std::string(op_name(custom_call(id, {Value(Tensor::ones({3}))}))) == "twice_like_first");
}
