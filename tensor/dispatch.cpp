#include <volt/tensor/dispatch.h>

#include <array>
#include <mutex>
#include <optional>

#include <volt/tensor/attention.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/custom_op.h>

namespace volt {

namespace {
thread_local DispatchMode* g_mode = nullptr;
thread_local bool g_grad_enabled = true;
GradHook g_grad_hook = nullptr;
constexpr size_t kNumDeviceTypes = 3;  // DeviceType's values
std::array<Backend*, kNumDeviceTypes> g_backends{};
std::array<ItemResolver, kNumDeviceTypes> g_item_resolvers{};
LazyHandler g_lazy_handler = nullptr;
}  // namespace

void set_lazy_handler(LazyHandler fn) { g_lazy_handler = fn; }

// Whether a call reads a lazy tensor or makes one (a factory on the lazy device).
static bool on_lazy(const OpCall& call) {
  if (call.attrs.device.is_lazy()) return true;
  for (const Value& v : call.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.device().is_lazy()) return true;
  return false;
}

DispatchMode* current_mode() { return g_mode; }
ModeGuard::ModeGuard(DispatchMode* mode) : prev_(g_mode) { g_mode = mode; }
ModeGuard::~ModeGuard() { g_mode = prev_; }

void set_item_resolver(DeviceType type, ItemResolver fn) {
  g_item_resolvers[static_cast<size_t>(type)] = fn;
}
ItemResolver item_resolver(DeviceType type) { return g_item_resolvers[static_cast<size_t>(type)]; }

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }
void set_grad_hook(GradHook hook) { g_grad_hook = hook; }

namespace {
// Backends found on first use (a GPU's, whose driver must not be touched
// before main: a tool such as compute-sanitizer attaches to the process when
// CUDA starts, and refuses a CUDA started by a static constructor).
struct Provider {
  BackendProvider fn = nullptr;
  std::once_flag once;
};
std::array<Provider, kNumDeviceTypes>& providers() {
  static std::array<Provider, kNumDeviceTypes> p;
  return p;
}
}  // namespace

Backend* backend_for(DeviceType type) {
  const size_t i = static_cast<size_t>(type);
  if (Backend* b = g_backends[i]) return b;
  Provider& p = providers()[i];
  if (!p.fn) return nullptr;
  std::call_once(p.once, [&] {
    if (Backend* b = p.fn()) g_backends[i] = b;
  });
  return g_backends[i];
}
void register_backend(DeviceType type, Backend* backend) {
  g_backends[static_cast<size_t>(type)] = backend;
}
void register_backend_provider(DeviceType type, BackendProvider fn) {
  providers()[static_cast<size_t>(type)].fn = fn;
}

static std::vector<Tensor> dispatch_now(OpCall& call) {
  if (DispatchMode* m = g_mode) return m->run(call);
  return run_eager(call);
}

// Autocast (tensor/autocast.h) acts here, before any mode, so eager mode, the
// lazy device and a compiled step's tracer all see the same casts.
std::vector<Tensor> dispatch(OpCall call) {
  if (std::optional<DType> low = autocast_dtype(); low && autocast_arguments(call, *low)) {
    if (autocast_reaches_inside(call.op)) return dispatch_now(call);
    AutocastGuard inside(std::nullopt);  // its decomposition is not cast again
    return dispatch_now(call);
  }
  return dispatch_now(call);
}

Tensor dispatch1(OpCall call) { return dispatch(std::move(call)).at(0); }

static bool needs_grad(const OpCall& call) {
  if (!g_grad_enabled || !g_grad_hook) return false;
  for (const Value& v : call.args)
    if (v.is_tensor && v.tensor.defined() && v.tensor.requires_grad()) return true;
  return false;
}

void record_for_grad(const OpCall& call, std::vector<Tensor>& outputs) {
  if (needs_grad(call)) g_grad_hook(call, outputs);
}

// The strides that let `a` be read as `shape` without a copy, if any (PyTorch's
// computeStride): dims may merge or split only within runs that are contiguous
// with each other, so e.g. a transpose's rows can be unsqueezed or selected.
std::optional<Shape> reshape_strides(const Tensor& a, const Shape& shape) {
  const Shape& os = a.sizes();
  const Shape& ost = a.strides();
  if (os.empty()) return Shape(shape.size(), 1);
  if (a.numel() == 0) return contiguous_strides(shape);
  Shape st(shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    // The end of a run of dims that are contiguous with each other.
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

// A view shares its input's storage; only the metadata changes.
static Tensor make_view(const OpCall& call, const TensorMeta& m) {
  const Tensor& a = call.args[0].tensor;
  const TensorImpl& in = *a.impl();
  Shape strides;
  int64_t offset = in.offset;
  switch (call.op) {
    case OpId::reshape: {
      // Viewable by construction: run_prim made a copy first when it is not.
      strides = reshape_strides(a, m.sizes).value();
      break;
    }
    case OpId::permute:
      for (int64_t d : call.attrs.ints) strides.push_back(in.strides[d]);
      break;
    case OpId::expand: {
      size_t lead = m.sizes.size() - in.sizes.size();
      strides.assign(m.sizes.size(), 0);
      for (size_t i = 0; i < in.sizes.size(); ++i)
        strides[lead + i] = in.sizes[i] == m.sizes[lead + i] ? in.strides[i] : 0;
      break;
    }
    case OpId::narrow:
      strides = in.strides;
      offset += call.attrs.ints[1] * in.strides[call.attrs.ints[0]];
      break;
    default:
      VOLT_FAIL(op_name(call.op), "is not a view");
  }
  Tensor v = make_tensor(in.storage, m.sizes, std::move(strides), offset, m.dtype, m.device);
  v.impl()->is_view = true;
  return v;
}

// A custom op's own kernel, its outputs checked against its metadata.
static std::vector<Tensor> run_custom(const OpCall& call) {
  if (g_lazy_handler && on_lazy(call)) return g_lazy_handler(call);
  const CustomOpDef& def = custom_op(call.attrs.custom);
  VOLT_CHECK(def.kernel, def.name, "has no kernel to run it");
  std::vector<Tensor> outs = def.kernel(call.args);
  if (def.meta) {
    std::vector<TensorMeta> metas = def.meta(call.args);
    VOLT_CHECK(metas.size() == outs.size(), def.name,
               "its kernel returned " << outs.size() << " tensors, its metadata says " << metas.size());
    for (size_t i = 0; i < outs.size(); ++i)
      VOLT_CHECK(outs[i].defined() && outs[i].sizes() == metas[i].sizes && outs[i].dtype() == metas[i].dtype,
                 def.name, "output " << i << " of its kernel is "
                                     << (outs[i].defined() ? outs[i].meta_str() : std::string("undefined"))
                                     << ", its metadata says " << dtype_name(metas[i].dtype)
                                     << shape_str(metas[i].sizes));
  }
  return outs;
}

std::vector<Tensor> run_prim(const OpCall& call) {
  if (call.op == OpId::custom) return run_custom(call);
  if (g_lazy_handler && on_lazy(call)) return g_lazy_handler(call);
  std::vector<TensorMeta> metas = infer_meta(call);
  std::vector<Tensor> outs;
  if (op_info(call.op).kind == OpKind::View && metas[0].device.type != DeviceType::Lazy) {
    const Tensor& a = call.args[0].tensor;
    if (call.op == OpId::reshape && !reshape_strides(a, metas[0].sizes)) {
      OpCall c{OpId::copy, {a}, {}};
      OpCall r = call;
      r.args[0] = run_prim(c)[0];
      return run_prim(r);
    }
    outs.push_back(make_view(call, metas[0]));
    return outs;
  }
  Backend* be = backend_for(metas[0].device.type);
  VOLT_CHECK(be != nullptr, op_name(call.op),
             "device " << metas[0].device.str() << " is not available in this build");
  outs.reserve(metas.size());
  for (const TensorMeta& m : metas) outs.push_back(Tensor::empty(m.sizes, m.dtype, m.device));
  be->run(call, outs);
  return outs;
}

// Whether eager mode runs a composite as one fused kernel: the device has one
// (Backend::fuses), the operands are real tensors of the kinds the kernel takes,
// and, for a backward op, no gradient of it is wanted (its decomposition is
// what autograd differentiates).  Anything else decomposes, as before.
static bool runs_fused(const OpCall& call) {
  if (!has_fused_kernel(call.op)) return false;
  if (g_lazy_handler && on_lazy(call)) return false;
  for (const Value& v : call.args)
    if (!v.is_tensor || !v.tensor.defined() || !v.tensor.has_data()) return false;
  const size_t first = fused_logits_index(call.op);
  if (call.args.size() != first + 2) return false;
  const Tensor& logits = call.args[first].tensor;
  const Tensor& target = call.args[first + 1].tensor;
  if (logits.dim() != 2 || logits.sizes()[1] == 0 || !is_floating(logits.dtype()) || target.dim() != 1 ||
      !is_integral(target.dtype()))
    return false;
  if (first == 1 && needs_grad(call)) return false;
  Backend* be = backend_for(logits.device().type);
  return be != nullptr && be->fuses(call.op);
}

static std::vector<Tensor> run_fused(const OpCall& call) {
  std::vector<TensorMeta> metas = fused_meta(call);
  std::vector<Tensor> outs;
  for (const TensorMeta& m : metas) outs.push_back(Tensor::empty(m.sizes, m.dtype, m.device));
  backend_for(metas[0].device.type)->run(call, outs);
  if (needs_grad(call)) g_grad_hook(call, outs);  // autograd/vjp.cpp has its rule
  return outs;
}

// A composite on CPU or CUDA tensors of bf16 or f16 (softmax, layer_norm,
// mean, cross_entropy, ...): decomposed on f32 copies and each floating result
// rounded back once, as PyTorch's kernels compute these types in f32
// throughout; decomposed in the 16-bit type itself, every step would round.
static bool half_composite(const OpCall& call, DType& half) {
  bool any = false;
  for (const Value& v : call.args) {
    if (!v.is_tensor || !v.tensor.defined()) continue;
    const Device d = v.tensor.device();
    if (!(d.is_cpu() || d.is_cuda()) || !v.tensor.has_data()) return false;
    if (is_half(v.tensor.dtype()) && !any) half = v.tensor.dtype(), any = true;
  }
  return any;
}

static Tensor converted(const Tensor& t, DType dtype) {
  Attrs at;
  at.dtype = dtype;
  return dispatch1(OpCall{OpId::convert_element_type, {t}, at});
}

static std::vector<Tensor> decompose_in_f32(const OpCall& call, DType half) {
  // How this composite computes, not a call of the user's: autocast would cast
  // attention's f32 copies back to `half` and land here again.
  AutocastGuard as_kernel(std::nullopt);
  OpCall wide = call;
  for (Value& v : wide.args)
    if (v.is_tensor && v.tensor.defined() && is_half(v.tensor.dtype())) v.tensor = converted(v.tensor, DType::f32);
  std::vector<Tensor> outs = dispatch(wide);
  for (Tensor& t : outs)
    if (t.defined() && t.dtype() == DType::f32) t = converted(t, half);
  return outs;
}

std::vector<Tensor> run_eager(const OpCall& call) {
  if (call.op == OpId::custom) {
    // A composite with a kernel runs the kernel unless a gradient is needed:
    // its decomposition is what autograd can differentiate.
    const CustomOpDef& def = custom_op(call.attrs.custom);
    if (def.decomposition && (!def.kernel || needs_grad(call))) return decompose(call);
    std::vector<Tensor> outs = run_custom(call);
    if (needs_grad(call)) g_grad_hook(call, outs);
    return outs;
  }
  if (!is_prim(call.op)) {
    if (g_lazy_handler && on_lazy(call) && attention_runs_whole(call)) {
      // One node; autograd has its rule.  Its dropout mask takes its counters
      // now, as the decomposition's draw would: the same mask as eager mode's.
      OpCall node = call;
      if (attention_draws(node)) {
        const PhiloxState st = rng_reserve(attention_mask_counters(node));
        node.attrs.seed = st.seed;
        node.attrs.offset = st.offset;
      }
      std::vector<Tensor> outs = g_lazy_handler(node);
      if (needs_grad(node)) g_grad_hook(node, outs);
      return outs;
    }
    if (DType half = DType::f32; half_composite(call, half)) return decompose_in_f32(call, half);
    return runs_fused(call) ? run_fused(call) : decompose(call);
  }
  std::vector<Tensor> outs = run_prim(call);
  if (needs_grad(call)) g_grad_hook(call, outs);
  return outs;
}

}  // namespace volt
