// bf16 and f16 on the CPU: conversions to and from every other dtype, and the
// widening that runs any prim on them through its f32 kernel.  Widening is
// exact (every bf16 and f16 value is an f32), so an op computes in f32 and
// rounds once when its result is stored, as PyTorch does on the CPU.
#include <volt/tensor/cpu/half.h>

#include <type_traits>

#include <volt/tensor/cpu/convert_bf16.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>

namespace volt::cpu {
namespace {

// bf16 <-> f32 between two plain buffers of the same shape, in vectors
// (convert_bf16.h), split over threads; false when either is not plain.
template <class From, class To>
bool convert_plain(Tensor& out, const Tensor& src, void (*fn)(const From*, To*, int64_t)) {
  if (!out.is_contiguous() || !src.is_contiguous() || src.sizes() != out.sizes()) return false;
  const From* s = static_cast<const From*>(src.raw_data());
  To* d = static_cast<To*>(out.raw_data());
  parallel_for(out.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) { fn(s + i0, d + i0, i1 - i0); });
  return true;
}

// out (contiguous f32 or half) <- src (any strides), src or out bf16/f16.
template <class H>
void widen_into(Tensor& out, const Tensor& src) {  // src: H, out: f32
  if constexpr (std::is_same_v<H, BF16>)
    if (convert_plain<BF16, float>(out, src, bf16_to_f32)) return;
  Operand o = operand_of(src, out.sizes());
  elementwise<float, H, 1>(out, {o}, [](H a) { return a.to_float(); });
}
template <class H>
void narrow_into(Tensor& out, const Tensor& src) {  // src: f32, out: H
  if constexpr (std::is_same_v<H, BF16>)
    if (convert_plain<float, BF16>(out, src, f32_to_bf16)) return;
  Operand o = operand_of(src, out.sizes());
  elementwise<H, float, 1>(out, {o}, [](float a) { return H::from_float(a); });
}

Tensor to_f32(const Tensor& src) {
  Tensor t = Tensor::empty(src.sizes(), DType::f32, kCPU);
  convert_half(src, t);
  return t;
}

bool half_in(const OpCall& call, const std::vector<Tensor>& outs) {
  for (const Value& v : call.args)
    if (v.is_tensor && v.tensor.defined() && is_half(v.tensor.dtype())) return true;
  for (const Tensor& t : outs)
    if (is_half(t.dtype())) return true;
  return false;
}

// Draws of U[lo, hi) rounded to H stay in [lo, hi) (volt::half_draw_bounds).
template <class H>
void keep_in_range(Tensor& out, double lo, double hi) {
  H top, bottom;
  half_draw_bounds(lo, hi, bottom, top);
  H* p = static_cast<H*>(out.raw_data());
  const float t = top.to_float(), b = bottom.to_float();
  parallel_for(out.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float v = p[i].to_float();
      if (v > t) p[i] = top;
      else if (v < b) p[i] = bottom;
    }
  });
}

}  // namespace

void convert_half(const Tensor& src, Tensor& out) {
  const DType s = src.dtype(), d = out.dtype();
  if (s == d) {  // the bits as they are, NaN payloads included
    Operand o = operand_of(src, out.sizes());
    elementwise<uint16_t, uint16_t, 1>(out, {o}, [](uint16_t a) { return a; });
    return;
  }
  if (is_half(s)) {  // through f32, exact
    Tensor wide = d == DType::f32 ? out : Tensor::empty(src.sizes(), DType::f32, kCPU);
    if (s == DType::bf16) widen_into<BF16>(wide, src);
    else widen_into<F16>(wide, src);
    if (d != DType::f32) convert_half(wide, out);
    return;
  }
  if (d == DType::f32 || !is_half(d)) {
    VOLT_DISPATCH_DTYPE(d, [&] { convert_into<scalar_t>(out, src); });
    return;
  }
  // Into bf16 or f16: one rounding from f32 (f64 is rounded to f32 first, as
  // PyTorch's conversion does).
  Tensor narrow = src;
  if (s != DType::f32) {
    narrow = Tensor::empty(src.sizes(), DType::f32, kCPU);
    convert_into<float>(narrow, src);
  }
  if (d == DType::bf16) narrow_into<BF16>(out, narrow);
  else narrow_into<F16>(out, narrow);
}

bool run_widened(const OpCall& call, std::vector<Tensor>& outs, const WidenedRun& run) {
  const OpKind kind = op_info(call.op).kind;
  const bool half_attr = (kind == OpKind::Random || kind == OpKind::Factory) && is_half(call.attrs.dtype);
  if (!half_attr && !half_in(call, outs)) return false;
  OpCall wide = call;
  if (half_attr) wide.attrs.dtype = DType::f32;
  for (Value& v : wide.args)
    if (v.is_tensor && v.tensor.defined() && is_half(v.tensor.dtype())) v.tensor = to_f32(v.tensor);
  std::vector<Tensor> wide_outs;
  for (const Tensor& t : outs)
    wide_outs.push_back(is_half(t.dtype()) ? Tensor::empty(t.sizes(), DType::f32, kCPU) : t);
  run(wide, wide_outs);
  for (size_t i = 0; i < outs.size(); ++i)
    if (is_half(outs[i].dtype())) convert_half(wide_outs[i], outs[i]);
  if (kind == OpKind::Random && call.attrs.b > call.attrs.a) {
    if (outs[0].dtype() == DType::bf16) keep_in_range<BF16>(outs[0], call.attrs.a, call.attrs.b);
    else keep_in_range<F16>(outs[0], call.attrs.a, call.attrs.b);
  }
  return true;
}

}  // namespace volt::cpu
