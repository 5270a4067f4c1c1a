// The jit on bf16 and f16 inputs: generated elementwise kernels load them into
// float, round each prim's result as eager mode stores it and store the bits,
// so a jitted function gives eager mode's bits; what they do not cover yet
// (row kernels, draws) is an error naming the op.
#include <doctest/doctest.h>

#include "tests/tensor/reference.h"

#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using volt::testing::bits16;

namespace {

std::vector<Tensor> program(const std::vector<Tensor>& a) {
  const Tensor x = a[0], y = a[1];
  const Tensor e = add(mul(exp(x), y), 1.5);                 // rounded after exp, mul and add
  const Tensor w = where(gt(x, 0.0), e, sigmoid(neg(y)));    // a select of rounded values
  const Tensor mixed = add(convert_element_type(w, DType::f32), a[2]);  // into f32
  return {w, mixed, lt(x, y), maximum(x, y.t().t())};
}

}  // namespace

TEST_CASE("jit on bf16 and f16: fused elementwise kernels give eager mode's bits") {
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(21);
    const Tensor x = randn({37, 19}, dt), y = randn({37, 19}, dt), z = randn({19});
    const std::vector<Tensor> want = program({x, y, z});
    auto f = jit::jit(program);
    const std::vector<Tensor> got = f({x, y, z});
    REQUIRE(got.size() == want.size());
    CHECK(got[0].dtype() == dt);
    CHECK(bits16(got[0]) == bits16(want[0]));
    CHECK(got[1].dtype() == DType::f32);
    CHECK(got[1].to_vector<float>() == want[1].to_vector<float>());
    CHECK(got[2].to_vector<bool>() == want[2].to_vector<bool>());
    CHECK(bits16(got[3]) == bits16(want[3]));
    REQUIRE(!jit::last_kernels(f).empty());  // it did generate kernels
    // Broadcast and strided inputs take the same path.
    const Tensor xt = randn({19, 37}, dt).t(), row = randn({19}, dt);
    auto g = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{mul(tanh(a[0]), a[1])}; });
    CHECK(bits16(g({xt, row})[0]) == bits16(mul(tanh(xt), row)));
  }
}

TEST_CASE("jit on bf16: a draw inside a kernel is a clear error naming the op") {
  // (dropout of a bf16 value draws in f32, as eager mode does, and fuses; a bf16 draw does not.)
  auto f = jit::jit([](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{add(a[0], uniform(a[0].sizes(), 0.0, 1.0, kBF16, a[0].device()))};
  });
  CHECK_THROWS_WITH_AS(f({ones({4, 4}, kBF16)}), doctest::Contains("do not compute on bf16"), volt::Error);
}
