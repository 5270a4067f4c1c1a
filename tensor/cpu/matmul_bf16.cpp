// matmul and linear on bf16 tensors through the bf16 GEMM (gemm_bf16.h): the
// sums in f32 (the bias added in f32 too), each result rounded once to bf16,
// as PyTorch computes them on the CPU; a matmul with its flag set
// (out_dtype=f32) keeps the f32 sums.  A B operand that is a kept weight
// (gemm_amx_weights.h) is packed once per value on the AMX path.  The f32
// sums of a bf16 result go through a buffer of the calling thread, kept
// between calls (no tensor allocated per product).  The bias is added row by
// row in parallel, and for a bf16 output in the same pass that rounds the row
// (one pass over the sums, not two): the same f32 additions and roundings.
#include <algorithm>
#include <vector>

#include <volt/tensor/cpu/convert_bf16.h>
#include <volt/tensor/cpu/gemm_amx_weights.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/half.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>
#include <volt/tensor/cpu/matmul_bf16.h>
#include <volt/tensor/cpu/threads.h>

namespace volt::cpu {
namespace {

// C = A B as gemm_bf16, B lying in `bt`'s storage: packed once per value when
// bt is a kept weight and the AMX path is in use.
void product(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const Tensor& bt, const BF16* b, int64_t n,
             int64_t brs, int64_t bcs, float* c, int64_t ldc) {
  if (m > 0 && k > 0 && n > 0 && bf16_gemm() == Bf16Gemm::amx)
    if (const auto packed = amx_packed_weight(bt, b, k, n, brs, bcs))
      return gemm_amx_packed(a, m, k, ars, acs, *packed, c, ldc);
  gemm_bf16(a, m, k, ars, acs, b, n, brs, bcs, c, ldc);
}

// o (batch..., m, n) f32, contiguous = a (batch..., m, k) b (batch..., k, n),
// both bf16, `out` giving the shape; a vector a or b as matmul takes it (a (k)
// is (1, k), b (k) is (k, 1)).
void batched(const Tensor& a0, const Tensor& b0, const Tensor& out, float* o) {
  const BatchedMatmul bm(a0, b0, out);
  const BF16* pa = static_cast<const BF16*>(bm.a.raw_data());
  const BF16* pb = static_cast<const BF16*>(bm.b.raw_data());
  for (int64_t i = 0; i < bm.count(); ++i) {
    const auto [oa, ob] = bm.offsets(i);
    product(pa + oa, bm.m, bm.k, bm.a.stride(-2), bm.a.stride(-1), bm.b, pb + ob, bm.n, bm.b.stride(-2),
            bm.b.stride(-1), o + i * bm.m * bm.n, bm.n);
  }
}

// The bias widened once (exactly) into a buffer of the calling thread.
const float* wide_bias(const Tensor& bias, int64_t n) {
  const Tensor b = bias.contiguous();
  thread_local std::vector<float> wide;
  wide.resize(static_cast<size_t>(n));
  bf16_to_f32(static_cast<const BF16*>(b.raw_data()), wide.data(), n);
  return wide.data();
}

// Rows [0, m) of o (m, n) f32: bias pb added (pb null: none), then, where dst
// is given, each row rounded into dst while it is in cache.  Rows in parallel.
void finish_rows(float* o, int64_t m, int64_t n, const float* pb, BF16* dst) {
  if (!pb && !dst) return;
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* row = o + i * n;
      if (pb)
        for (int64_t j = 0; j < n; ++j) row[j] += pb[j];
      if (dst) f32_to_bf16(row, dst + i * n, n);
    }
  });
}

// o (*, n) f32 = x (*, k) w^T, x and w bf16; the rows' count.
int64_t linear_product(const Tensor& x0, const Tensor& w, float* o) {
  const Tensor x = x0.dim() == 2 ? x0 : x0.contiguous().reshape({-1, x0.size(-1)});
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  product(static_cast<const BF16*>(x.raw_data()), m, k, x.stride(0), x.stride(1), w,
          static_cast<const BF16*>(w.raw_data()), n, w.stride(1), w.stride(0), o, n);
  return m;
}

// o (*, n) f32 = x (*, k) w^T (+ bias), x, w and bias bf16; where dst is
// given, o's rows are also rounded into dst (bf16, contiguous).
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, float* o, BF16* dst = nullptr) {
  const int64_t m = linear_product(x, w, o), n = w.size(0);
  finish_rows(o, m, n, bias ? wide_bias(*bias, n) : nullptr, dst);
}

// The calling thread's buffer for the f32 sums, grown as needed.
float* sums_buffer(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

}  // namespace

void bf16_linear_sums(const Tensor& x, const Tensor& w, const Tensor* bias, float* sums) { linear(x, w, bias, sums); }

bool run_bf16_matmul(const OpCall& call, Tensor& out) {
  if (call.op == OpId::matmul && call.attrs.flag) {  // out_dtype=f32: the sums as they are
    batched(call.args[0].tensor, call.args[1].tensor, out, static_cast<float*>(out.raw_data()));
    return true;
  }
  if (out.dtype() != DType::bf16) return false;
  const int64_t numel = out.numel();
  const bool plain = out.is_contiguous();  // else through an f32 tensor and convert_half
  Tensor wide = plain ? Tensor() : Tensor::empty(out.sizes(), DType::f32, kCPU);
  float* sums = plain ? sums_buffer(numel) : static_cast<float*>(wide.raw_data());
  BF16* dst = plain ? static_cast<BF16*>(out.raw_data()) : nullptr;
  if (call.op == OpId::matmul) {
    batched(call.args[0].tensor, call.args[1].tensor, out, sums);
    if (dst)
      parallel_for(numel, kParallelGrain, [&](int64_t i0, int64_t i1) { f32_to_bf16(sums + i0, dst + i0, i1 - i0); });
  } else {
    linear(call.args[0].tensor, call.args[1].tensor, call.args.size() == 3 ? &call.args[2].tensor : nullptr, sums, dst);
  }
  if (!plain) convert_half(wide, out);
  return true;
}

}  // namespace volt::cpu
