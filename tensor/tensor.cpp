#include <volt/tensor/tensor.h>

#include <cmath>
#include <numeric>

#include <volt/tensor/backend.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/value_range.h>

namespace volt {

Tensor make_tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset,
                   DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

// ---------------------------------------------------------------- factories

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) VOLT_CHECK(d >= 0, "empty", "negative dimension in " << shape_str(shape));
  if (device.is_lazy()) return full(shape, 0.0, dtype, device);
  const int64_t nbytes = checked_mul(shape_numel(shape, "empty"),
                                     static_cast<int64_t>(dtype_size(dtype)), shape, "empty");
  Shape strides = contiguous_strides(shape, "empty");
  return make_tensor(Storage::allocate(static_cast<size_t>(nbytes), device), shape,
                     std::move(strides), 0, dtype, device);
}

Tensor Tensor::proxy(const Shape& shape, DType dtype, Device device) {
  return make_tensor(nullptr, shape, contiguous_strides(shape, "proxy"), 0, dtype, device);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor Tensor::full(const Shape& shape, Scalar value, DType dtype, Device device) {
  return volt::full(shape, value.value, dtype, device);
}
Tensor Tensor::scalar_tensor(Scalar v, DType dtype, Device device) {
  return volt::full({}, v.value, dtype, device);
}

Tensor Tensor::arange(double end, DType dtype, Device device) {
  return arange(0, end, 1, dtype, device);
}
Tensor Tensor::arange(double start, double end, double step, DType dtype, Device device) {
  VOLT_CHECK(step != 0, "arange", "step must be nonzero");
  VOLT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange",
             "expected finite start, end and step, got " << start << ", " << end << ", " << step);
  const double count = std::ceil((end - start) / step);
  VOLT_CHECK(count < 9.0e18, "arange", "[" << start << ", " << end << ") in steps of " << step
                                           << " has too many elements");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  // An integer dtype must hold every value (u8 cannot count to 300).
  VOLT_CHECK(n == 0 || (holds_value(dtype, start) && holds_value(dtype, start + static_cast<double>(n - 1) * step)),
             "arange", "[" << start << ", " << end << ") in steps of " << step << " does not fit in "
                           << dtype_name(dtype));
  // A prim (through dispatch), so that traced code records it.
  Attrs at;
  at.ints = {n};
  at.a = start;
  at.b = step;
  at.dtype = dtype;
  at.device = device;
  return dispatch1(OpCall{OpId::arange, {}, at});
}

Tensor Tensor::rand(const Shape& shape, DType dtype, Device device) {
  VOLT_CHECK(is_floating(dtype), "rand", "expected a floating dtype, got " << dtype_name(dtype));
  return uniform(shape, 0.0, 1.0, dtype, device);
}

Tensor Tensor::randn(const Shape& shape, DType dtype, Device device) {
  VOLT_CHECK(is_floating(dtype), "randn", "expected a floating dtype, got " << dtype_name(dtype));
  // bf16 and f16: the same draws as f32, each rounded once more.
  if (is_half(dtype)) return randn(shape, DType::f32, kCPU).to(dtype).to(device);
  int64_t n = shape_numel(shape);
  PhiloxState st = rng_reserve(static_cast<uint64_t>(n));
  Tensor t = empty(shape, dtype, kCPU);
  VOLT_DISPATCH_DTYPE(dtype, [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<scalar_t>(philox_normal(st.seed, st.offset, static_cast<uint64_t>(i)));
  });
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device) {
  VOLT_CHECK(high > low, "randint", "expected low < high, got " << low << " >= " << high);
  VOLT_CHECK(!is_half(dtype), "randint", "draws integers; " << dtype_name(dtype) << " is not supported");
  int64_t n = shape_numel(shape);
  PhiloxState st = rng_reserve(static_cast<uint64_t>(n));
  Tensor t = empty(shape, dtype, kCPU);
  double range = static_cast<double>(high - low);
  VOLT_DISPATCH_DTYPE(dtype, [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      double u = philox_uniform_f64(st.seed, st.offset, static_cast<uint64_t>(i));
      p[i] = static_cast<scalar_t>(low + static_cast<int64_t>(std::floor(u * range)));
    }
  });
  return device.is_cpu() ? t : t.to(device);
}

// ---------------------------------------------------------------- metadata

// wrap_dim accepts dim 0 of a 0-dim tensor (as PyTorch's does), which has no size to read.
int64_t Tensor::size(int64_t d) const {
  const int64_t w = wrap_dim(d, dim(), "size");
  VOLT_CHECK(dim() > 0, "size", "a 0-dim tensor has no dim " << d);
  return sizes()[w];
}
int64_t Tensor::stride(int64_t d) const {
  const int64_t w = wrap_dim(d, dim(), "stride");
  VOLT_CHECK(dim() > 0, "stride", "a 0-dim tensor has no dim " << d);
  return strides()[w];
}

bool Tensor::is_contiguous() const {
  // No element to read: any strides are the contiguous ones (as in PyTorch).
  for (int64_t n : sizes())
    if (n == 0) return true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= sizes()[i];
  }
  return true;
}

std::string Tensor::meta_str() const {
  return device().str() + " " + dtype_name(dtype()) + shape_str(sizes());
}

void* Tensor::raw_data() const {
  VOLT_CHECK(has_data(), "data", "tensor " << meta_str()
                                           << " has no data (it is a traced proxy or lazy value)");
  return static_cast<char*>(ref().storage->data) +
         ref().offset * static_cast<int64_t>(dtype_size(dtype()));
}

double Tensor::item_double() const {
  VOLT_CHECK(numel() == 1, "item", "expected a tensor with one element, got " << meta_str());
  if (DispatchMode* m = current_mode(); m && !has_data()) return m->item(*this);
  if (!has_data()) {
    ItemResolver r = item_resolver(device().type);
    VOLT_CHECK(r != nullptr, "item", "tensor " << meta_str() << " has no data");
    return r(*this);
  }
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  if (c.dtype() == DType::bf16) return static_cast<const BF16*>(c.raw_data())->to_float();
  if (c.dtype() == DType::f16) return static_cast<const F16*>(c.raw_data())->to_float();
  return VOLT_DISPATCH_DTYPE(c.dtype(), [&] {
    return static_cast<double>(*static_cast<const scalar_t*>(c.raw_data()));
  });
}

Tensor::operator bool() const {
  VOLT_CHECK(numel() == 1, "bool",
             "the truth value of a tensor with " << numel() << " elements is ambiguous");
  return item_double() != 0;
}

// ---------------------------------------------------------------- views

static Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      VOLT_CHECK(infer < 0, op, "only one dimension can be -1 in " << shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      VOLT_CHECK(out[i] >= 0, op, "invalid shape " << shape_str(shape));
      known = checked_mul(known, out[i], shape, op);
    }
  }
  if (infer >= 0) {
    VOLT_CHECK(known != 0 && numel % known == 0, op,
               "shape " << shape_str(shape) << " is invalid for input of size " << numel);
    out[infer] = numel / known;
  }
  VOLT_CHECK(shape_numel(out, op) == numel, op,
             "shape " << shape_str(shape) << " is invalid for input of size " << numel);
  return out;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "view");
  // As PyTorch: any layout whose strides can express the new shape (splitting
  // the last dim of a column slice, say), not only a contiguous one.
  VOLT_CHECK(is_contiguous() || is_proxy() || reshape_strides(*this, s), "view",
             "cannot view a tensor " << meta_str() << " with strides " << shape_str(strides()) << " as "
                                     << shape_str(s) << " without a copy; use reshape()");
  return volt::reshape(*this, s);
}
Tensor Tensor::reshape(const Shape& shape) const {
  return volt::reshape(*this, infer_shape(shape, numel(), "reshape"));
}
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return volt::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(dim());
  std::iota(p.begin(), p.end(), 0);
  const int64_t w0 = wrap_dim(d0, dim(), "transpose"), w1 = wrap_dim(d1, dim(), "transpose");
  if (dim() == 0) return volt::permute(*this, p);  // transpose(0, 0) of a 0-dim tensor: itself
  std::swap(p[w0], p[w1]);
  return volt::permute(*this, p);
}
Tensor Tensor::t() const {
  VOLT_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dims, got " << meta_str());
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::expand(const Shape& shape) const { return volt::expand(*this, shape); }
Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(s.begin() + d, 1);
  return volt::reshape(*this, s);
}
Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : sizes())
    if (v != 1) s.push_back(v);
  return volt::reshape(*this, s);
}
Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (dim() == 0 || sizes()[d] != 1) return *this;
  Shape s = sizes();
  s.erase(s.begin() + d);
  return volt::reshape(*this, s);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return volt::narrow(*this, d, start, length);
}
Tensor Tensor::select(int64_t d, int64_t index) const {
  VOLT_CHECK(dim() > 0, "select", "cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes()[d];
  VOLT_CHECK(index >= -n && index < n, "select",
             "index " << index << " is out of range for dim " << d << " of size " << n);
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  d = wrap_dim(d, dim(), "slice");
  int64_t n = sizes()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return narrow(d, start, end - start);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  VOLT_CHECK(start_dim <= end_dim, "flatten", "start_dim " << start_dim << " > end_dim " << end_dim);
  Shape s(sizes().begin(), sizes().begin() + start_dim);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m = checked_mul(m, sizes()[i], sizes(), "flatten");
  s.push_back(m);
  s.insert(s.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(s);
}
Tensor Tensor::contiguous() const {
  if (is_contiguous() && !is_proxy() && has_data()) return *this;
  return volt::contiguous(*this);
}
Tensor Tensor::clone() const { return volt::contiguous(*this); }
Tensor Tensor::to(DType t) const { return t == dtype() ? *this : convert_element_type(*this, t); }

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (d.is_lazy() || device().is_lazy()) {
    Backend* be = backend_for(DeviceType::Lazy);
    VOLT_CHECK(be != nullptr, "to", "the lazy device is not available");
    // A lazy destination is a handle with no data; the lazy backend's copy gives it its value.
    Tensor out = d.is_lazy() ? proxy(sizes(), dtype(), d) : empty(sizes(), dtype(), d);
    be->copy(out, *this);
    return out;
  }
  Tensor src = *this;
  Tensor out = empty(sizes(), dtype(), d);
  // The non-CPU side does the copy (it knows how to reach host memory).
  Backend* be = backend_for(d.is_cpu() ? device().type : d.type);
  VOLT_CHECK(be != nullptr, "to", "device " << d.str() << " is not available");
  be->copy(out, src);
  return out;
}

// ---------------------------------------------------------------- in place

static void check_inplace(const Tensor& t, const char* op) {
  VOLT_CHECK(!(t.requires_grad() && t.is_leaf() && grad_enabled()), op,
             "a leaf tensor that requires grad cannot be modified in place; use NoGradGuard");
  // A lazy tensor has no data: writing it in place gives it a new pending value.
  VOLT_CHECK(t.has_data() || t.device().is_lazy(), op, "cannot modify a tensor without data in place");
  for (int64_t d = 0; d < t.dim(); ++d)
    VOLT_CHECK(t.sizes()[d] <= 1 || t.strides()[d] != 0, op,
               "the destination " << t.meta_str() << " is an expanded view: its elements share memory (stride 0 in dim "
                                  << d << "), so one write would land on many of them; clone() it first");
}

// Writes `value` (any dtype or device; broadcast to this shape) into this
// tensor's memory: the one in-place write every other goes through.
Tensor& Tensor::assign_(const Tensor& value, const char* op) {
  // A traced value written in place (a compiled training step's state): the
  // mode records the new value, or refuses.
  DispatchMode* mode = current_mode();
  if (mode && is_proxy() && !device().is_lazy()) {
    VOLT_CHECK(!(requires_grad() && is_leaf() && grad_enabled()), op,
               "a leaf tensor that requires grad cannot be modified in place; use NoGradGuard");
    Tensor s = value;
    if (s.device() != device()) s = s.to(device());
    if (s.dtype() != dtype()) s = s.to(dtype());
    if (s.sizes() != sizes()) s = s.expand(sizes());
    VOLT_CHECK(mode->assign(*this, s), op,
               "cannot modify a tensor without data in place while this trace records ("
                   << meta_str() << "); compile the whole step with volt::jit::compile_step");
    return *this;
  }
  check_inplace(*this, op);
  const bool recorded = grad_enabled() && (requires_grad() || value.requires_grad());
  Tensor s = value;
  if (recorded) {
    VOLT_CHECK(!ref().is_view, op,
               "cannot write in place into a view (" << meta_str()
                   << ") of a tensor autograd records: the base would keep a stale history; clone() it first, "
                      "or write under NoGradGuard");
    // The write's history: the value's own node, or a copy recorded for it (a
    // leaf has no node, and a cast or broadcast is part of the write).
    if (value.requires_grad() &&
        (value.is_leaf() || value.device() != device() || value.dtype() != dtype() || value.sizes() != sizes()))
      s = volt::contiguous(value.to(device()).to(dtype()).expand(sizes()));
  }
  {
    NoGradGuard no_grad;
    if (s.device() != device()) s = s.to(device());
    if (s.dtype() != dtype()) s = s.to(dtype());
    if (s.sizes() != sizes()) s = s.expand(sizes());
    backend_for(device().type)->copy(*this, s);
  }
  mark_modified();
  if (recorded) {
    // The old value's history is over: this tensor now has the value's, or
    // none when the value needs no grad (it no longer depends on anything).
    ref().grad_fn = s.requires_grad() ? s.impl()->grad_fn : nullptr;
    ref().output_nr = s.requires_grad() ? s.impl()->output_nr : 0;
    ref().requires_grad = s.requires_grad();
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) { return assign_(src, "copy_"); }

Tensor& Tensor::fill_(Scalar v) { return assign_(volt::full({}, v.value, dtype(), device()), "fill_"); }

Tensor& Tensor::add_(const Tensor& other, Scalar alpha) {
  Tensor o = alpha.value == 1.0 ? other : volt::mul(other, Value(alpha));
  return assign_(volt::add(*this, o), "add_");
}
Tensor& Tensor::add_(Scalar other) { return assign_(volt::add(*this, Value(other)), "add_"); }
Tensor& Tensor::mul_(const Tensor& other) {
  // other's gradient needs this tensor's old value: when it is wanted, the
  // product reads a recorded copy, which the write below leaves alone.
  const bool keep_old = grad_enabled() && other.requires_grad();
  return assign_(volt::mul(keep_old ? volt::contiguous(*this) : *this, other), "mul_");
}
Tensor& Tensor::mul_(Scalar other) { return assign_(volt::mul(*this, Value(other)), "mul_"); }

// ---------------------------------------------------------------- method forms

Tensor Tensor::sum(const Dims& d, bool k) const { return volt::sum(*this, d.vec(), k); }
Tensor Tensor::mean(const Dims& d, bool k) const { return volt::mean(*this, d.vec(), k); }
Tensor Tensor::amax(const Dims& d, bool k) const { return volt::amax(*this, d.vec(), k); }
Tensor Tensor::argmax(int64_t d, bool k) const { return volt::argmax(*this, d, k); }
Tensor Tensor::argmax() const { return volt::argmax(flatten(), 0); }
Tensor Tensor::max() const { return volt::max(*this); }
Tensor Tensor::min() const { return volt::min(*this); }
Tensor Tensor::eq(const Tensor& o) const { return volt::eq(*this, o); }
Tensor Tensor::eq(Scalar o) const { return volt::eq(*this, Value(o)); }
Tensor Tensor::ne(const Tensor& o) const { return volt::ne(*this, o); }
Tensor Tensor::ne(Scalar o) const { return volt::ne(*this, Value(o)); }
Tensor Tensor::lt(const Tensor& o) const { return volt::lt(*this, o); }
Tensor Tensor::lt(Scalar o) const { return volt::lt(*this, Value(o)); }
Tensor Tensor::le(const Tensor& o) const { return volt::le(*this, o); }
Tensor Tensor::le(Scalar o) const { return volt::le(*this, Value(o)); }
Tensor Tensor::gt(const Tensor& o) const { return volt::gt(*this, o); }
Tensor Tensor::gt(Scalar o) const { return volt::gt(*this, Value(o)); }
Tensor Tensor::ge(const Tensor& o) const { return volt::ge(*this, o); }
Tensor Tensor::ge(Scalar o) const { return volt::ge(*this, Value(o)); }
Tensor Tensor::abs() const { return volt::abs(*this); }
Tensor Tensor::neg() const { return volt::neg(*this); }
Tensor Tensor::sqrt() const { return volt::sqrt(*this); }
Tensor Tensor::pow(const Tensor& e) const { return volt::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return volt::pow(*this, Value(e)); }
Tensor Tensor::matmul(const Tensor& o) const { return volt::matmul(*this, o); }
Tensor Tensor::exp() const { return volt::exp(*this); }
Tensor Tensor::log() const { return volt::log(*this); }
Tensor Tensor::relu() const { return volt::relu(*this); }
Tensor Tensor::argmin(int64_t d, bool k) const { return volt::argmin(*this, d, k); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return volt::max(*this, d, k); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return volt::min(*this, d, k); }
std::vector<Tensor> Tensor::chunk(int64_t n, int64_t d) const { return volt::chunk(*this, n, d); }
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const { return volt::split(*this, s, d); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& s, int64_t d) const { return volt::split(*this, s, d); }
Tensor Tensor::masked_fill(const Tensor& m, Scalar v) const { return volt::masked_fill(*this, m, v); }
Tensor Tensor::tril(int64_t k) const { return volt::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return volt::triu(*this, k); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return volt::clamp(*this, lo, hi); }
Tensor Tensor::softmax(int64_t d) const { return volt::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return volt::log_softmax(*this, d); }
bool Tensor::allclose(const Tensor& o, double r, double a, bool n) const { return volt::allclose(*this, o, r, a, n); }
bool Tensor::equal(const Tensor& o) const { return volt::equal(*this, o); }

Tensor& Tensor::requires_grad_(bool on) {
  VOLT_CHECK(!on || is_floating(dtype()), "requires_grad_",
             "only floating tensors can require grad, got " << dtype_name(dtype()));
  ref().requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = ref().storage;
  impl2->sizes = sizes();
  impl2->strides = strides();
  impl2->offset = ref().offset;
  impl2->dtype = dtype();
  impl2->device = device();
  impl2->proxy_id = ref().proxy_id;
  impl2->proxy_owner = ref().proxy_owner;
  impl2->backend_state = ref().backend_state;
  return Tensor(std::move(impl2));
}

}  // namespace volt
