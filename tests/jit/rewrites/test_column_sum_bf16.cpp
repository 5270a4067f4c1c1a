// A bf16 value summed over its leading dims in f32, sum(convert(g, f32), {0})
// (a bias's gradient under autocast), or in bf16, sum(g, {0}): the rewrite
// "bf16 column sums" runs either as one region that widens each element as
// it adds it (jit/rewrites/column_sum.h).  Its result must be the bits of the
// program without the rewrite and of a naive loop (f64 chains in row order,
// rounded to f32 once, then to bf16 for a bf16 sum), with no f32 copy of g.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/jit.h>
#include <volt/jit/rewrites/column_sum.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;

namespace {

// Column j of g (rows = the product of its first `lead` dims): the widened
// elements added in row order in f64, rounded to f32 once.
Tensor reference(const Tensor& g, int64_t lead) {
  const Tensor w = g.to(DType::f32).contiguous();
  int64_t rows = 1;
  for (int64_t d = 0; d < lead; ++d) rows *= g.size(d);
  const int64_t cols = g.numel() / rows;
  Shape out_shape(g.sizes().begin() + lead, g.sizes().end());
  Tensor out = Tensor::empty(out_shape, DType::f32, kCPU);
  const float* p = w.data_ptr<float>();
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += static_cast<double>(p[i * cols + j]);
    out.data_ptr<float>()[j] = static_cast<float>(s);
  }
  return out;
}

int column_sum_regions(const jit::Trace& t) {
  int n = 0;
  for (const jit::BoundSymbol& b : t.bsyms) n += jit::is_bf16_column_sum(b) ? 1 : 0;
  return n;
}

// widen: sum(convert(g, f32)); else sum(g) in bf16 (rounded once).
jit::JitFunction summed(std::vector<int64_t> dims, bool keepdim, bool rewrite, bool widen) {
  jit::JitOptions o;
  if (!rewrite) o.pipeline.without = {"bf16 column sums"};
  return jit::JitFunction(
      [dims, keepdim, widen](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{sum(widen ? in[0].to(DType::f32) : in[0], dims, keepdim)};
      },
      {"g"}, {}, {}, nullptr, o);
}

}  // namespace

TEST_CASE("bf16 column sums: a bf16 value summed over its leading dims in f32, the bits of the unfused program and of f64 chains") {
  manual_seed(81);
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  // 45 and 100 columns: a block of 32 in registers and a tail; 3 x 700 rows
  // split over the threads by columns.
  const Case cases[] = {{{64, 45}, {0}, false}, {{3, 700, 100}, {0, 1}, false}, {{4, 5, 32}, {0, 1}, true}};
  for (const Case& c : cases)
   for (bool widen : {true, false}) {
    CAPTURE(c.shape.size());
    CAPTURE(c.keepdim);
    CAPTURE(widen);
    // Values of mixed sign and size, so that the order of the additions shows.
    const Tensor g = mul(Tensor::randn(c.shape), mul(Tensor::rand(c.shape), 100.0)).to(DType::bf16);
    auto fused = summed(c.dims, c.keepdim, true, widen), plain = summed(c.dims, c.keepdim, false, widen);
    const Tensor got = fused({g})[0], want = plain({g})[0];
    CHECK(got.dtype() == (widen ? DType::f32 : DType::bf16));
    CHECK(same_bits(got, want));
    const Tensor ref = reference(g, static_cast<int64_t>(c.dims.size()));
    CHECK(same_bits(got.reshape({-1}), (widen ? ref : ref.to(DType::bf16)).reshape({-1})));
    const jit::Trace& t = jit::last_traces(fused).back();
    CHECK(column_sum_regions(t) == 1);
    CHECK(column_sum_regions(jit::last_traces(plain).back()) == 0);
    // No f32 copy of g: the region's one input is g, its one output the sums.
    for (const jit::BoundSymbol& b : t.bsyms)
      if (jit::is_bf16_column_sum(b)) {
        CHECK(b.fusion_inputs.front().dtype() == DType::bf16);
        CHECK(b.outputs.front().sizes() == got.sizes());
        if (c.shape.size() == 2) MESSAGE("the column sum as one region:\n" << t.str());
      }
  }
}

TEST_CASE("bf16 column sums: left alone where the widened copy has another reader, the sum is not over leading dims, or the value is f32") {
  manual_seed(82);
  const Tensor g = Tensor::randn({16, 24}).to(DType::bf16);
  auto check_none = [&](jit::JitFunction f, const std::vector<Tensor>& in) {
    f(in);
    CHECK(column_sum_regions(jit::last_traces(f).back()) == 0);
  };
  // The f32 copy is also returned.
  check_none(jit::JitFunction(
                 [](const std::vector<Tensor>& in) {
                   const Tensor w = in[0].to(DType::f32);
                   return std::vector<Tensor>{sum(w, {0}), w};
                 },
                 {"g"}),
             {g});
  // Over the last dim (a row reduction, fused as such).
  check_none(jit::JitFunction([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0].to(DType::f32), {1})}; },
                              {"g"}),
             {g});
  // A bf16 sum over the last dim of a bf16 value stays as it is too.
  check_none(jit::JitFunction([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {1})}; }, {"g"}),
             {g});
  // An f32 value: nothing is widened.
  check_none(jit::JitFunction([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {0})}; }, {"g"}),
             {g.to(DType::f32)});
}
