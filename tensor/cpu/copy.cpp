// The CPU kernels that move values without arithmetic: conversion between
// dtypes, copies into strided views, where, the factories and padding.
#include <algorithm>
#include <cstring>

#include <volt/tensor/cpu/half.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>
#include <volt/tensor/op_table.h>

namespace volt::cpu {
namespace {

void where_operands(const std::array<Operand, 3>& in, Tensor& out) {
  VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
    Shape sh = out.sizes();
    int64_t n = out.numel(), nd = out.dim();
    scalar_t* o = static_cast<scalar_t*>(out.raw_data());
    const bool* c = reinterpret_cast<const bool*>(in[0].ptr);
    const scalar_t* a = reinterpret_cast<const scalar_t*>(in[1].ptr);
    const scalar_t* b = reinterpret_cast<const scalar_t*>(in[2].ptr);
    if (const int mask = scalar_mask(in, sh); mask >= 0 && n > 0) {
      // The condition read as bytes (a bool is 0 or 1): GCC vectorises a
      // select on a byte, not on a bool load, and the branchy scalar loop
      // mispredicts on every other element of a random mask (a ReLU's).
      const uint8_t* cb = reinterpret_cast<const uint8_t*>(c);
      with_mask<3>(mask, [&]<int M>() {
        flat_loop<M, scalar_t>(o, n, std::tuple{cb, a, b},
                               [](uint8_t ci, scalar_t ai, scalar_t bi) { return ci ? ai : bi; });
      });
      return;
    }
    Shape idx(nd, 0);
    int64_t oc = 0, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; ++k) {
      o[k] = c[oc] ? a[oa] : b[ob];
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++idx[d] < sh[d]) {
          oc += in[0].strides[d];
          oa += in[1].strides[d];
          ob += in[2].strides[d];
          break;
        }
        oc -= (sh[d] - 1) * in[0].strides[d];
        oa -= (sh[d] - 1) * in[1].strides[d];
        ob -= (sh[d] - 1) * in[2].strides[d];
        idx[d] = 0;
      }
    }
  });
}

// Scatters the contiguous tmp into dst's strides by walking dst as the "input"
// of a reversed copy.  T: the element type (or its bits).
template <class T>
void scatter(const Tensor& dst, const Tensor& tmp) {
  const T* s = static_cast<const T*>(tmp.raw_data());
  T* d = static_cast<T*>(dst.raw_data());
  const Shape& sh = dst.sizes();
  int64_t nd = dst.dim(), n = dst.numel();
  Shape idx(nd, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    d[off] = s[k];
    for (int64_t dd = nd - 1; dd >= 0; --dd) {
      if (++idx[dd] < sh[dd]) {
        off += dst.strides()[dd];
        break;
      }
      off -= (sh[dd] - 1) * dst.strides()[dd];
      idx[dd] = 0;
    }
  }
}

}  // namespace

void convert_kernel(const Tensor& src, Tensor& out) {
  if (is_half(src.dtype()) || is_half(out.dtype())) return convert_half(src, out);
  VOLT_DISPATCH_DTYPE(out.dtype(), [&] { convert_into<scalar_t>(out, src); });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  VOLT_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy_",
             "the CPU backend copies between CPU tensors only");
  VOLT_CHECK(dst.dtype() == src.dtype() && dst.sizes() == src.sizes(), "copy_",
             "expected " << dst.meta_str() << ", got " << src.meta_str());
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(dst.raw_data(), src.raw_data(), dst.numel() * dtype_size(dst.dtype()));
    return;
  }
  // Through a contiguous temporary, so overlapping views stay correct.
  Tensor tmp = Tensor::empty(src.sizes(), src.dtype(), kCPU);
  convert_kernel(src, tmp);
  Operand o = operand_of(tmp, dst.sizes());
  // bf16 and f16 move as their bits.
  if (is_half(dst.dtype())) return scatter<uint16_t>(dst, tmp);
  VOLT_DISPATCH_DTYPE(dst.dtype(), [&] { scatter<scalar_t>(dst, tmp); });
}

void where_kernel(const OpCall& call, Tensor& out) {
  const DType c = compute_dtype(call);
  Prepared cond = prepare(call, 0, DType::b8, out.sizes());
  Prepared ab = prepare(call, 1, c, out.sizes());
  where_operands({cond.ops[0], ab.ops[0], ab.ops[1]}, out);
}

void factory_kernel(const OpCall& call, Tensor& out) {
  VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
    scalar_t* o = static_cast<scalar_t*>(out.raw_data());
    if (call.op == OpId::arange) {  // start a, step b
      for (int64_t i = 0; i < out.numel(); ++i)
        o[i] = static_cast<scalar_t>(call.attrs.a + static_cast<double>(i) * call.attrs.b);
      return;
    }
    scalar_t v = static_cast<scalar_t>(call.attrs.a);
    std::fill(o, o + out.numel(), v);
  });
}

// a: (..., n, rest...) -> out: (..., before + n + after, rest...), zeros around.
void pad_kernel(const OpCall& call, Tensor& out) {
  const Tensor& given = call.args[0].tensor;
  const int64_t dim = call.attrs.ints[0], before = call.attrs.ints[1];
  if (out.is_contiguous() && given.dtype() == out.dtype()) {
    // Row by row in bytes: each outer index is a zero head, a's block and a
    // zero tail (the gradient of a narrow, e.g. of q, k, v split from one GEMM).
    const Tensor a = given.is_contiguous() ? given : given.contiguous();
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(out.dtype()));  // inner: bytes
    for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
    for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
    const int64_t head = before * inner, body = a.size(dim) * inner, row = out.size(dim) * inner;
    auto* o = static_cast<char*>(out.raw_data());
    const auto* s = static_cast<const char*>(a.raw_data());
    for (int64_t r = 0; r < outer; ++r, o += row, s += body) {
      std::memset(o, 0, static_cast<size_t>(head));
      std::memcpy(o + head, s, static_cast<size_t>(body));
      std::memset(o + head + body, 0, static_cast<size_t>(row - head - body));
    }
    return;
  }
  VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
    scalar_t* o = static_cast<scalar_t*>(out.raw_data());
    std::fill(o, o + out.numel(), scalar_t{});
  });
  Tensor inner = out.narrow(dim, before, given.size(dim));
  copy_kernel(inner, given);
}

}  // namespace volt::cpu
