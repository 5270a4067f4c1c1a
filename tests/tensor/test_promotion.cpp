// Type promotion as in PyTorch: dimensioned tensors outrank zero-dim tensors,
// which outrank Python-style scalars, unless the lower one is of a higher kind.
#include <doctest/doctest.h>

#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {
Tensor t1(DType dt) { return Tensor::ones({2}, dt); }
Tensor t0(DType dt) { return Tensor::ones({}, dt); }
}  // namespace

TEST_CASE("promote_types follows PyTorch's table") {
  CHECK(promote_types(DType::i32, DType::f32) == DType::f32);
  CHECK(promote_types(DType::u8, DType::i64) == DType::i64);
  CHECK(promote_types(DType::u8, DType::i32) == DType::i32);
  CHECK(promote_types(DType::b8, DType::u8) == DType::u8);
  CHECK(promote_types(DType::b8, DType::b8) == DType::b8);
  CHECK(promote_types(DType::i64, DType::f32) == DType::f32);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(promote_types(DType::i32, DType::i64) == DType::i64);
  for (DType a : all_dtypes())
    for (DType b : all_dtypes()) CHECK(promote_types(a, b) == promote_types(b, a));
}

TEST_CASE("tensor with tensor") {
  CHECK(add(t1(DType::i32), t1(DType::f32)).dtype() == DType::f32);
  CHECK(add(t1(DType::u8), t1(DType::i64)).dtype() == DType::i64);
  CHECK(add(t1(DType::b8), t1(DType::b8)).dtype() == DType::b8);
  CHECK(add(t1(DType::b8), t1(DType::u8)).dtype() == DType::u8);
  CHECK(mul(t1(DType::i64), t1(DType::f64)).dtype() == DType::f64);
  CHECK(div(t1(DType::i32), t1(DType::i32)).dtype() == DType::f32);
  CHECK(div(t1(DType::u8), t1(DType::b8)).dtype() == DType::f32);
  CHECK(div(t1(DType::f64), t1(DType::i32)).dtype() == DType::f64);
  CHECK(maximum(t1(DType::i32), t1(DType::i64)).dtype() == DType::i64);
}

TEST_CASE("zero-dim tensors only promote across kinds") {
  CHECK(add(t1(DType::f32), t0(DType::f64)).dtype() == DType::f32);
  CHECK(add(t0(DType::f64), t1(DType::f32)).dtype() == DType::f32);
  CHECK(add(t1(DType::i32), t0(DType::i64)).dtype() == DType::i32);
  CHECK(add(t1(DType::u8), t0(DType::i64)).dtype() == DType::u8);
  CHECK(add(t1(DType::i32), t0(DType::f64)).dtype() == DType::f64);  // higher kind: its dtype
  CHECK(add(t1(DType::b8), t0(DType::i32)).dtype() == DType::i32);
  CHECK(add(t0(DType::i32), t0(DType::f64)).dtype() == DType::f64);  // two zero-dim: normal rules
  CHECK(add(t0(DType::f32), t0(DType::f64)).dtype() == DType::f64);
  Tensor r = add(t1(DType::f32), Tensor::scalar_tensor(0.1, DType::f64));
  CHECK(r.to_vector<float>()[0] == 1.0f + 0.1f);  // computed in f32
}

TEST_CASE("scalars only promote across kinds, to the default dtype") {
  CHECK(mul(t1(DType::i32), Value(Scalar(2.5))).dtype() == DType::f32);
  CHECK((t1(DType::i32) * 2.5).dtype() == DType::f32);
  CHECK((t1(DType::i64) * 2.5).dtype() == DType::f32);
  CHECK((t1(DType::u8) * 2).dtype() == DType::u8);
  CHECK((t1(DType::i32) + (int64_t{1} << 40)).dtype() == DType::i32);
  CHECK((t1(DType::f64) * 2.5).dtype() == DType::f64);
  CHECK((t1(DType::f32) * 1e300).dtype() == DType::f32);
  CHECK((t1(DType::b8) + 1).dtype() == DType::i64);
  CHECK((t1(DType::b8) * 1.5).dtype() == DType::f32);
  CHECK((t1(DType::b8) + true).dtype() == DType::b8);
  CHECK((t1(DType::i32) + true).dtype() == DType::i32);
  CHECK((t0(DType::i32) * 2.5).dtype() == DType::f32);
  CHECK((t0(DType::f64) * 2).dtype() == DType::f64);
  CHECK((t1(DType::i32) / 2).dtype() == DType::f32);
  CHECK((t1(DType::i32) / 2).to_vector<float>()[0] == 0.5f);
  // A zero-dim tensor of a higher kind beats a scalar; a scalar of a higher kind beats both.
  CHECK(add(add(t1(DType::i32), t0(DType::i64)), Value(Scalar(1.5))).dtype() == DType::f32);
  CHECK(where(t1(DType::b8), t1(DType::i32), t0(DType::f64)).dtype() == DType::f64);
  CHECK(where(t1(DType::b8), t1(DType::i32), 1.5).dtype() == DType::f32);
  CHECK(where(t1(DType::b8), t1(DType::u8), 1).dtype() == DType::u8);
}

TEST_CASE("comparisons and logical ops always give b8") {
  for (DType a : all_dtypes())
    for (DType b : all_dtypes()) {
      CHECK(eq(t1(a), t1(b)).dtype() == DType::b8);
      CHECK(lt(t1(a), t0(b)).dtype() == DType::b8);
      CHECK(logical_or(t1(a), t1(b)).dtype() == DType::b8);
    }
  CHECK(ge(t1(DType::i32), 2.5).dtype() == DType::b8);
  CHECK((t1(DType::f32) < 0).dtype() == DType::b8);
  // Compared in the promoted dtype: 1 < 1.5 even for an integer tensor.
  CHECK(lt(t1(DType::i32), 1.5).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(gt(Tensor::from_vector<int32_t>({2}), 1.5).item<bool>());
}

TEST_CASE("unary float ops promote integers to f32") {
  for (DType dt : {DType::b8, DType::u8, DType::i32, DType::i64}) {
    CHECK(exp(t1(dt)).dtype() == DType::f32);
    CHECK(sqrt(t1(dt)).dtype() == DType::f32);
    CHECK(sigmoid(t1(dt)).dtype() == DType::f32);
  }
  CHECK(exp(t1(DType::f64)).dtype() == DType::f64);
  CHECK(neg(t1(DType::i32)).dtype() == DType::i32);
  CHECK(abs(t1(DType::u8)).dtype() == DType::u8);
}
