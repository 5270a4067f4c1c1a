// The CUDA backend: every prim as a kernel on the device's one stream.
// Elementwise prims run a one-prim kernel generated from the op table's
// expression (tensor/cuda/kernels.cpp), reductions a hand-written row
// reduction, matmul/linear cuBLAS, uniform the shared Philox function.
#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <volt/tensor/backend.h>
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/conv.h>
#include <volt/tensor/cuda/kernels.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>

namespace volt::cuda {

cudaKernel_t cached_kernel(const std::string& name, int device, const std::function<std::string()>& make_source) {
  static std::mutex mutex;
  static std::unordered_map<std::string, cudaKernel_t> kernels;
  const std::string key = name + "@" + std::to_string(device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = kernels.find(key); it != kernels.end()) return it->second;
  }
  cudaKernel_t k = get_kernel(prelude() + make_source(), name, device);
  std::lock_guard<std::mutex> lock(mutex);
  kernels[key] = k;
  return k;
}

namespace {

static_assert(sizeof(IndexArg) == 328, "the prelude's volt_index has the same layout");

// Strides of `t` read in the broadcast shape `shape` (0 along broadcast dims).
void broadcast_strides(const Tensor& t, const Shape& shape, long long* out) {
  size_t lead = shape.size() - t.sizes().size();
  for (size_t d = 0; d < shape.size(); ++d) out[d] = 0;
  for (size_t i = 0; i < t.sizes().size(); ++i) out[lead + i] = t.sizes()[i] == 1 ? 0 : t.strides()[i];
}

bool dense_like(const Tensor& t, const Shape& shape) { return t.sizes() == shape && t.is_contiguous(); }

// The stride of dims (sizes, strides) merged into one, if they merge (size-1 dims
// do not count); 1 for no dims at all.
std::optional<long long> merged_stride(const Shape& sizes, const Shape& strides) {
  std::optional<long long> inner;
  long long extent = 1;  // elements the dims inside the current one span
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (!inner) inner = strides[i];
    else if (strides[i] != *inner * extent) return std::nullopt;
    extent *= sizes[i];
  }
  return inner ? *inner : 1;
}

}  // namespace

std::vector<void*> ElementwiseLaunch::params() {
  std::vector<void*> p{&n, &ix, &out};
  for (size_t k = 0; k < ptrs.size(); ++k) p.push_back(ptrs[k] ? static_cast<void*>(&ptrs[k]) : &scalars[k]);
  return p;
}

ElementwiseLaunch prepare_elementwise(const OpCall& call, const Tensor& out) {
  const OpId op = call.op;
  const std::vector<Value>& args = call.args;
  VOLT_CHECK(out.dim() <= kMaxDims, op_name(op), "CUDA kernels support up to " << kMaxDims << " dims, got "
                                                                                << out.meta_str());
  ElementwiseLaunch L;
  L.spec = elementwise_spec(call, out.dtype(), false);
  L.n = out.numel();
  L.out = out.raw_data();
  L.ptrs.assign(args.size(), nullptr);
  L.scalars.assign(args.size(), 0.0);
  bool strided = !out.is_contiguous();
  L.ix.ndim = static_cast<int>(out.dim());
  for (int d = 0; d < L.ix.ndim; ++d) {
    L.ix.size[d] = out.sizes()[d];
    L.ix.stride[0][d] = out.strides()[d];
  }
  for (size_t k = 0; k < args.size(); ++k) {
    const Value& v = args[k];
    if (!v.is_tensor) {
      L.scalars[k] = v.scalar.value;
    } else if (L.spec.operands[k].is_scalar) {  // a zero-dim CPU tensor
      L.scalars[k] = v.tensor.item_double();
    } else {
      VOLT_CHECK(v.tensor.device() == out.device(), op_name(op),
                 "expected tensors on " << out.device().str() << ", got " << v.tensor.meta_str());
      VOLT_CHECK(v.tensor.has_data(), op_name(op), "got a tensor without data (" << v.tensor.meta_str() << ")");
      L.ptrs[k] = v.tensor.raw_data();
      broadcast_strides(v.tensor, out.sizes(), L.ix.stride[k + 1]);
      strided |= !dense_like(v.tensor, out.sizes());
    }
  }
  L.spec.strided = strided;
  return L;
}

ReduceLaunch prepare_reduce(const OpCall& call, const Tensor& out) {
  const Tensor& a = call.args[0].tensor;
  const auto& dims = call.attrs.ints;
  ReduceLaunch R;
  // Kept dims first, reduced dims last: then each output element is one row.
  Shape ps, pst, kept_sizes, kept_strides, reduced_sizes, reduced_strides;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < a.dim(); ++d) {
      const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (reduced != (pass == 1)) continue;
      ps.push_back(a.sizes()[d]);
      pst.push_back(a.strides()[d]);
      (reduced ? reduced_sizes : kept_sizes).push_back(a.sizes()[d]);
      (reduced ? reduced_strides : kept_strides).push_back(a.strides()[d]);
      if (reduced) R.len *= a.sizes()[d];
    }
  R.rows_view = a.dim() == 0 ? a : make_tensor(a.impl()->storage, ps, pst, a.storage_offset(), a.dtype(), a.device());
  R.rows = out.numel();
  const std::optional<long long> rs = merged_stride(kept_sizes, kept_strides);
  const std::optional<long long> es = merged_stride(reduced_sizes, reduced_strides);
  R.in_place = rs && es;
  R.row_stride = R.in_place ? *rs : R.len;
  R.elem_stride = R.in_place ? *es : 1;
  while (R.block < 256 && R.block < static_cast<unsigned long long>(R.len)) R.block *= 2;
  return R;
}

namespace {

// out (any strides) = op(args) on the GPU.
void launch_elementwise(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  ElementwiseLaunch L = prepare_elementwise(call, out);
  const int dev = out.device().index;
  cudaKernel_t kern = cached_kernel(elementwise_name(L.spec), dev, [&] { return elementwise_source(L.spec); });
  std::vector<void*> params = L.params();
  launch(kern, dev, L.n, params.data());
}

void run_reduce(const OpCall& call, const Tensor& out) {
  ReduceLaunch R = prepare_reduce(call, out);
  if (R.rows == 0) return;
  const Tensor& a = call.args[0].tensor;
  const int dev = out.device().index;
  Tensor x = R.in_place ? R.rows_view : contiguous_on_device(R.rows_view);
  const std::string name = reduce_name(call.op, a.dtype(), out.dtype());
  cudaKernel_t k = cached_kernel(name, dev, [&] { return reduce_source(call.op, a.dtype(), out.dtype()); });
  long long grid = std::min<long long>(R.rows, static_cast<long long>(multiprocessor_count(dev)) * 32);
  void* xp = x.raw_data();
  void* yp = out.raw_data();
  void* params[] = {&xp, &yp, &R.rows, &R.len, &R.row_stride, &R.elem_stride};
  launch(k, dev, dim3(static_cast<unsigned>(grid)), dim3(R.block), params);
}

void run_uniform(const OpCall& call, const Tensor& out) {
  const int dev = out.device().index;
  const DType t = out.dtype();
  cudaKernel_t k = cached_kernel(uniform_name(t), dev, [&] { return uniform_source(t); });
  long long n = out.numel();
  unsigned long long seed = call.attrs.seed, offset = call.attrs.offset;
  void* o = out.raw_data();
  float lo32 = static_cast<float>(call.attrs.a), hi32 = static_cast<float>(call.attrs.b);
  double lo64 = call.attrs.a, hi64 = call.attrs.b;
  const bool f64 = t == DType::f64;
  // bf16/f16: the clamp of the rounded draws (kernels.h), none for an empty range.
  float bottom = -std::numeric_limits<float>::infinity(), top = std::numeric_limits<float>::infinity();
  if (is_half(t) && call.attrs.b > call.attrs.a) half_bounds(t, call.attrs.a, call.attrs.b, bottom, top);
  void* params[] = {&o, &n, &seed, &offset, f64 ? static_cast<void*>(&lo64) : &lo32,
                    f64 ? static_cast<void*>(&hi64) : &hi32, &bottom, &top};
  launch(k, dev, n, params);
}

// cross_entropy (logits, target) or cross_entropy_backward (g, logits, target):
// one launch, no synchronisation (a bad target is reported through the error word).
void run_cross_entropy(const OpCall& call, const Tensor& out) {
  NoGradGuard no_grad;
  const size_t first = fused_logits_index(call.op);
  const bool backward = first == 1;
  const int dev = out.device().index;
  const Tensor x = contiguous_on_device(call.args[first].tensor);
  const Tensor& target = call.args[first + 1].tensor;
  const Tensor t =
      contiguous_on_device(target.dtype() == DType::i64 ? target : convert_element_type(target, DType::i64));
  const DType dt = x.dtype();
  long long n = x.sizes()[0], c = x.sizes()[1];
  cudaKernel_t k = cached_kernel(cross_entropy_name(dt, backward), dev, [&] { return cross_entropy_source(dt, backward); });
  void* xp = x.raw_data();
  void* tp = t.raw_data();
  void* op = out.raw_data();
  long long* err = error_word(dev);
  double nan = std::numeric_limits<double>::quiet_NaN();
  const CrossEntropyOptions opt = cross_entropy_options(call.attrs);
  long long ignore = opt.ignore_index;
  double smoothing = opt.label_smoothing;
  long long reduction = static_cast<long long>(opt.reduction);
  if (!backward) {
    void* params[] = {&xp, &tp, &n, &c, &op, &err, &nan, &ignore, &smoothing, &reduction};
    launch(k, dev, dim3(1), dim3(256), params);
    return;
  }
  const Tensor g = call.args[0].tensor.to(out.device()).to(dt).contiguous();
  void* gp = g.raw_data();
  if (n == 0) return;
  // The rows not ignored, counted on the device (no synchronisation): mean
  // divides by it.  Up to kCountInKernel rows each thread of the kernel counts
  // them itself (n reads of the targets, cached), which saves three launches;
  // a longer batch is counted once by a reduction.
  constexpr long long kCountInKernel = 4096;
  Tensor count;
  if (opt.reduction == Reduction::Mean && n > kCountInKernel)
    count = sum(convert_element_type(ne(t, Scalar(opt.ignore_index)), DType::f64));
  const void* cp = count.defined() ? count.raw_data() : nullptr;
  void* params[] = {&gp, &xp, &tp, &n, &c, &op, &err, &nan, &ignore, &smoothing, &reduction, &cp};
  launch(k, dev, n, params);
}

}  // namespace

void fill(const Tensor& t, double value) {
  const int dev = t.device().index;
  const DType dt = t.dtype();
  cudaKernel_t k = cached_kernel(fill_name(dt), dev, [&] { return fill_source(dt); });
  long long n = t.numel();
  void* o = t.raw_data();
  void* params[] = {&o, &n, &value};
  launch(k, dev, n, params);
}

void strided_copy(const Tensor& dst, const Tensor& src) {
  VOLT_CHECK(src.dtype() == dst.dtype(), "copy_", "expected " << dst.meta_str() << ", got " << src.meta_str());
  launch_elementwise(OpCall{OpId::copy, {src}, {}}, dst);
}

Tensor contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  strided_copy(out, t);
  return out;
}

namespace {

class CudaBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, int device_index) override { return device_allocate(nbytes, device_index); }
  void deallocate(void* p, int device_index) override { device_free(p, device_index); }

  void copy(const Tensor& dst, const Tensor& src) override {
    VOLT_CHECK(dst.dtype() == src.dtype() && dst.sizes() == src.sizes(), "copy_",
               "expected " << dst.meta_str() << ", got " << src.meta_str());
    VOLT_CHECK(dst.device().is_cuda() || src.device().is_cuda(), "copy_", "the CUDA backend copies to or from CUDA");
    if (dst.numel() == 0) return;
    const size_t nbytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype());
    if (src.device().is_cpu()) {  // host -> device
      check_device(dst.device(), "copy_");
      const int dev = dst.device().index;
      Tensor s = src.contiguous();
      Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dst.device());
      DeviceGuard g(dev);
      // From pageable memory the copy has read the host buffer when it returns.
      VOLT_CUDA_CHECK(cudaMemcpyAsync(d.raw_data(), s.raw_data(), nbytes, cudaMemcpyHostToDevice, stream(dev)));
      if (!d.is_same(dst)) strided_copy(dst, d);
      return;
    }
    if (dst.device().is_cpu()) {  // device -> host: synchronises
      check_device(src.device(), "copy_");
      const int dev = src.device().index;
      Tensor s = contiguous_on_device(src);
      Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), kCPU);
      DeviceGuard g(dev);
      VOLT_CUDA_CHECK(cudaMemcpyAsync(d.raw_data(), s.raw_data(), nbytes, cudaMemcpyDeviceToHost, stream(dev)));
      cuda::synchronize(dev);  // and reports what a kernel recorded in the error word
      if (!d.is_same(dst)) backend_for(DeviceType::CPU)->copy(dst, d);
      return;
    }
    check_device(src.device(), "copy_");
    check_device(dst.device(), "copy_");
    if (src.device() != dst.device()) {  // device -> device
      Tensor s = contiguous_on_device(src);
      Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dst.device());
      cuda::synchronize(src.device().index);  // s is complete before the other device reads it
      DeviceGuard g(dst.device().index);
      VOLT_CUDA_CHECK(cudaMemcpyPeerAsync(d.raw_data(), dst.device().index, s.raw_data(), src.device().index, nbytes,
                                          stream(dst.device().index)));
      // s belongs to the source device's allocator: done with it before it can be reused.
      cuda::synchronize(dst.device().index);
      if (!d.is_same(dst)) strided_copy(dst, d);
      return;
    }
    // Same device: through a temporary when both views share storage (they may overlap).
    Tensor s = src;
    if (src.impl()->storage == dst.impl()->storage) {
      s = Tensor::empty(src.sizes(), src.dtype(), src.device());
      strided_copy(s, src);
    }
    strided_copy(dst, s);
  }

  bool fuses(OpId op) const override { return has_fused_kernel(op); }

  void run(const OpCall& call, std::vector<Tensor>& outs) override {
    Tensor& out = outs[0];
    const OpInfo& info = op_info(call.op);
    check_device(out.device(), info.name);
    for (const Value& v : call.args)
      if (v.is_tensor && v.tensor.defined())
        VOLT_CHECK(v.tensor.has_data(), info.name, "got a tensor without data (" << v.tensor.meta_str() << ")");
    // bf16 and f16: elementwise, reductions, draws, fills and GEMMs have 16-bit
    // kernels; eager dispatch decomposes 16-bit composites on f32 copies, so
    // the fused cross-entropy sees f32 (and names the dtype otherwise).
    switch (info.kind) {
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Compare:
      case OpKind::Ternary:
      case OpKind::Convert:
      case OpKind::Copy:
        launch_elementwise(call, out);
        return;
      case OpKind::Random:
        run_uniform(call, out);
        return;
      case OpKind::Factory:
        if (call.op == OpId::arange) {  // made on the host, then copied
          Attrs host = call.attrs;
          host.device = kCPU;
          copy(out, run_prim(OpCall{OpId::arange, {}, host}).at(0));
          return;
        }
        fill(out, call.attrs.a);
        return;
      case OpKind::Pad: {
        NoGradGuard no_grad;
        fill(out, 0.0);
        const Tensor& a = call.args[0].tensor;
        strided_copy(out.narrow(call.attrs.ints[0], call.attrs.ints[1], a.size(call.attrs.ints[0])), a);
        return;
      }
      case OpKind::Reduce:
        run_reduce(call, out);
        return;
      case OpKind::Matmul:
        if (call.op == OpId::matmul) cublas_matmul(call.args[0].tensor, call.args[1].tensor, out);
        else cublas_linear(call.args[0].tensor, call.args[1].tensor,
                           call.args.size() == 3 ? &call.args[2].tensor : nullptr, out);
        return;
      case OpKind::Window:
        run_window(call, out);
        return;
      case OpKind::Composite:
        VOLT_CHECK(fuses(call.op), info.name, "is a composite op without a fused CUDA kernel");
        run_cross_entropy(call, out);
        return;
      default:
        VOLT_FAIL(info.name, "has no CUDA kernel");
    }
  }

  // Only devices volt has used: asking an untouched one would create a
  // context on every visible GPU.
  void synchronize() override {
    for (int d = 0; d < device_count(); ++d)
      if (cuda::is_initialized(d)) cuda::synchronize(d);
  }
};

// There only where a GPU and its driver answer: elsewhere CUDA tensors fail
// with "device cuda:0 is not available" and everything else runs on the CPU.
// Asked at the first CUDA tensor, not before main: CUDA must not start in a
// static constructor (compute-sanitizer then refuses to attach).
Backend* provide_backend() {
  static CudaBackend backend;
  return is_available() ? &backend : nullptr;
}
struct Registrar {
  Registrar() { register_backend_provider(DeviceType::CUDA, &provide_backend); }
} g_registrar;

}  // namespace
}  // namespace volt::cuda
