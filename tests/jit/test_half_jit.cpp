// The jit on bf16 and f16 inputs: generated elementwise kernels load them into
// float, round each prim's result as eager mode stores it and store the bits,
// so a jitted function gives eager mode's bits; row kernels (a LayerNorm, a
// softmax) take the converts to and from bf16 around them into their own
// kernel; what they do not cover yet (draws) is an error naming the op.
#include <doctest/doctest.h>

#include "tests/jit/row_kernels.h"
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

namespace {

int regions(const jit::Trace& t) {
  int n = 0;
  for (const jit::BoundSymbol& b : t.bsyms) n += b.is_fusion() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("jit on bf16: a LayerNorm into bf16 and a softmax from bf16 are one row kernel each, same bits") {
  // The reference: the same row kernel in f32 (its convert of the bf16 input
  // exact), its result rounded eagerly -- the arithmetic is the same, so the bits are.
  manual_seed(22);
  for (int64_t L : {7, 128, 1000}) {
    CAPTURE(L);
    const Tensor x = mul(randn({5, L}), 3.0), g = randn({L}), b = randn({L});
    auto ln32 = jit::jit([L](const std::vector<Tensor>& a) { return std::vector<Tensor>{layer_norm(a[0], {L}, a[1], a[2])}; });
    auto ln16 = jit::jit([L](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{convert_element_type(layer_norm(a[0], {L}, a[1], a[2]), kBF16)};
    });
    const Tensor got = ln16({x, g, b})[0];
    CHECK(got.dtype() == kBF16);
    CHECK(bits16(got) == bits16(convert_element_type(ln32({x, g, b})[0], kBF16)));
    CHECK(regions(jit::last_traces(ln16).back()) == 1);
    CHECK(volt::testing::row_kernels(jit::last_traces(ln16).back()) == std::pair<int, int>{1, 0});

    const Tensor h = convert_element_type(x, kBF16);
    auto sm32 = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{softmax(a[0], -1)}; });
    auto sm16 = jit::jit([](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{convert_element_type(softmax(convert_element_type(a[0], DType::f32), -1), kBF16)};
    });
    const Tensor s = sm16({h})[0];
    CHECK(bits16(s) == bits16(convert_element_type(sm32({convert_element_type(h, DType::f32)})[0], kBF16)));
    CHECK(regions(jit::last_traces(sm16).back()) == 1);
  }
}

TEST_CASE("jit on bf16: the LayerNorm's gradient from a bf16 one is the f32 row kernel's") {
  // d/dx sum(bf16(layer_norm(x)) * w) with w bf16: the gradient reaching the
  // LayerNorm is w widened (exact), so the f32 function with w in f32 is the reference.
  manual_seed(23);
  const int64_t L = 96;
  const Tensor x0 = randn({6, L}), w = convert_element_type(randn({6, L}), kBF16);
  auto grad_of = [&](bool half) {
    auto f = jit::jit([L, half](const std::vector<Tensor>& a) {
      const Tensor y = layer_norm(a[0], {L});
      return std::vector<Tensor>{half ? convert_element_type(y, kBF16) : y};
    });
    const Tensor x = x0.detach().clone().requires_grad_();
    const Tensor y = f({x})[0];
    sum(convert_element_type(mul(y, half ? w : convert_element_type(w, DType::f32)), DType::f32)).backward();
    return x.grad().to_vector<float>();
  };
  const std::vector<float> want = grad_of(false), got = grad_of(true);
  CHECK(got == want);
}
