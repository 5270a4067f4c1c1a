// matmul and linear on bf16 tensors through the bf16 GEMM (gemm_bf16.h): the
// sums in f32 (the bias added in f32 too), each result rounded once to bf16,
// as PyTorch computes them on the CPU; a matmul with its flag set
// (out_dtype=f32) keeps the f32 sums.
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/half.h>
#include <volt/tensor/cpu/kernels.h>

namespace volt::cpu {
namespace {

// out (batch..., m, n) f32 = a (batch..., m, k) b (batch..., k, n), both bf16;
// a vector a or b as matmul takes it (a (k) is (1, k), b (k) is (k, 1)).
void batched(const Tensor& a0, const Tensor& b0, Tensor& out) {
  const BatchedMatmul bm(a0, b0, out);
  const BF16* pa = static_cast<const BF16*>(bm.a.raw_data());
  const BF16* pb = static_cast<const BF16*>(bm.b.raw_data());
  float* o = static_cast<float*>(out.raw_data());
  for (int64_t i = 0; i < bm.count(); ++i) {
    const auto [oa, ob] = bm.offsets(i);
    gemm_bf16(pa + oa, bm.m, bm.k, bm.a.stride(-2), bm.a.stride(-1), pb + ob, bm.n, bm.b.stride(-2),
              bm.b.stride(-1), o + i * bm.m * bm.n, bm.n);
  }
}

// out (*, n) f32 = x (*, k) w^T (+ bias), x, w and bias bf16.
void linear(const Tensor& x0, const Tensor& w, const Tensor* bias, Tensor& out) {
  const Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  float* o = static_cast<float*>(out.raw_data());
  gemm_bf16(static_cast<const BF16*>(x.raw_data()), m, k, x.stride(0), x.stride(1),
            static_cast<const BF16*>(w.raw_data()), n, w.stride(1), w.stride(0), o, n);
  if (!bias) return;
  const Tensor b = bias->contiguous();
  const BF16* pb = static_cast<const BF16*>(b.raw_data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) o[i * n + j] += pb[j].to_float();
}

}  // namespace

bool run_bf16_matmul(const OpCall& call, Tensor& out) {
  if (call.op == OpId::matmul && call.attrs.flag) {  // out_dtype=f32: the sums as they are
    batched(call.args[0].tensor, call.args[1].tensor, out);
    return true;
  }
  if (out.dtype() != DType::bf16) return false;
  Tensor wide = Tensor::empty(out.sizes(), DType::f32, kCPU);
  if (call.op == OpId::matmul) batched(call.args[0].tensor, call.args[1].tensor, wide);
  else linear(call.args[0].tensor, call.args[1].tensor, call.args.size() == 3 ? &call.args[2].tensor : nullptr, wide);
  convert_half(wide, out);
  return true;
}

}  // namespace volt::cpu
