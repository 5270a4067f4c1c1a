// bf16 and f16 on the CUDA backend where no kernel reads them directly: the
// window ops (convolution, pooling) and cross-entropy run on f32 copies and
// round once when their results are stored, as the CPU backend does every op
// (tensor/cpu/half.cpp).  Widening is exact: every 16-bit value is an f32.
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/half.h>

namespace volt::cuda {

namespace {

// dst (any strides, any dtype) <- src converted, one elementwise kernel.
void convert_into(const Tensor& dst, const Tensor& src) {
  OpCall c{OpId::convert_element_type, {src}, {}};
  c.attrs.dtype = dst.dtype();
  ElementwiseLaunch L = prepare_elementwise(c, dst);
  if (L.n == 0) return;
  const int dev = dst.device().index;
  cudaKernel_t k = cached_kernel(elementwise_name(L.spec), dev, [&] { return elementwise_source(L.spec); });
  std::vector<void*> params = L.params();
  launch(k, dev, L.n, params.data());
}

bool is_half_tensor(const Value& v) { return v.is_tensor && v.tensor.defined() && is_half(v.tensor.dtype()); }

}  // namespace

bool run_widened(const OpCall& call, std::vector<Tensor>& outs, const WidenedRun& run) {
  bool any = false;
  for (const Value& v : call.args) any |= is_half_tensor(v);
  for (const Tensor& t : outs) any |= is_half(t.dtype());
  if (!any) return false;
  NoGradGuard no_grad;
  OpCall wide = call;
  for (Value& v : wide.args)
    if (is_half_tensor(v)) {
      Tensor f = Tensor::empty(v.tensor.sizes(), DType::f32, v.tensor.device());
      convert_into(f, v.tensor);
      v.tensor = f;
    }
  std::vector<Tensor> wide_outs;
  for (const Tensor& t : outs)
    wide_outs.push_back(is_half(t.dtype()) ? Tensor::empty(t.sizes(), DType::f32, t.device()) : t);
  run(wide, wide_outs);
  for (size_t i = 0; i < outs.size(); ++i)
    if (is_half(outs[i].dtype())) convert_into(outs[i], wide_outs[i]);
  return true;
}

void half_bounds(DType t, double lo, double hi, float& bottom, float& top) {
  VOLT_CHECK(is_half(t), "uniform", "expected bf16 or f16, got " << dtype_name(t));
  if (t == DType::bf16) {
    BF16 b, h;
    half_draw_bounds(lo, hi, b, h);
    bottom = b.to_float(), top = h.to_float();
  } else {
    F16 b, h;
    half_draw_bounds(lo, hi, b, h);
    bottom = b.to_float(), top = h.to_float();
  }
}

}  // namespace volt::cuda
