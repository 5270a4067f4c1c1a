// Ops written as plain compositions of prims, with no row of their own:
// joining and splitting (cat, stack, split, chunk), masks (masked_fill, tril,
// triu), clamp, max/min with indices, and the comparisons that answer a bool
// (allclose, equal).  A trace shows their prims; gradients come from the prims'.
#include <algorithm>
#include <cmath>

#include <volt/tensor/ops.h>
#include <volt/tensor/value_range.h>

namespace volt {

namespace {

void check_defined(const Tensor& t, const char* op) {
  VOLT_CHECK(t.defined(), op, "got an undefined tensor");
}

// A scalar of the tensor's kind: an integer tensor keeps its dtype, so the
// value must fit it (NaN, Inf or 300 for a u8 tensor is an error, as PyTorch's).
Value scalar_for(const Tensor& t, double v, const char* op) {
  VOLT_CHECK(holds_value(t.dtype(), v), op,
             "value " << v << " cannot be converted to " << dtype_name(t.dtype()) << " without overflow");
  if (t.dtype() == DType::b8) return Value(Scalar(v != 0));
  return is_floating(t.dtype()) ? Value(Scalar(v)) : Value(Scalar(static_cast<int64_t>(v)));
}

// wrap_dim accepts dim 0 of a 0-dim tensor, which has no size to split.
void check_has_dims(const Tensor& t, const char* op) {
  VOLT_CHECK(t.dim() > 0, op, "expected a tensor of at least 1 dim, got a 0-dim tensor");
}

Tensor keep_dtype(const Tensor& r, DType dt) { return r.dtype() == dt ? r : convert_element_type(r, dt); }

// keep[i, j] = (j - i) compared with `diagonal` over the last two dims of x.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  check_defined(x, op);
  VOLT_CHECK(x.dim() >= 2, op, "expected a tensor of at least 2 dims, got " << shape_str(x.sizes()));
  const int64_t n = x.sizes()[x.dim() - 2], m = x.sizes()[x.dim() - 1];
  Tensor rows = Tensor::arange(static_cast<double>(n), DType::i64, x.device()).unsqueeze(1);
  Tensor cols = Tensor::arange(static_cast<double>(m), DType::i64, x.device());
  Tensor offset = sub(cols, rows);  // (n, m)
  Tensor keep = lower ? le(offset, Scalar(diagonal)) : ge(offset, Scalar(diagonal));
  return keep_dtype(where(keep, x, scalar_for(x, 0, op)), x.dtype());
}

Tensor all_of(const Tensor& ok) { return sum(convert_element_type(ok, DType::i64)); }

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  VOLT_CHECK(!tensors.empty(), "cat", "expected a non-empty list of tensors");
  for (const Tensor& t : tensors) check_defined(t, "cat");
  const Tensor& first = tensors[0];
  VOLT_CHECK(first.dim() >= 1, "cat", "zero-dim tensors cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    VOLT_CHECK(t.dtype() == first.dtype(), "cat",
               "expected tensors of one dtype, got " << dtype_name(first.dtype()) << " (tensor 0) and "
                                                     << dtype_name(t.dtype()) << " (tensor " << i << ")");
    VOLT_CHECK(t.device() == first.device(), "cat",
               "expected tensors on one device, got " << first.device().str() << " and " << t.device().str()
                                                      << " (tensor " << i << ")");
    bool same = t.dim() == first.dim();
    for (int64_t d = 0; same && d < t.dim(); ++d) same = d == dim || t.sizes()[d] == first.sizes()[d];
    VOLT_CHECK(same, "cat",
               "sizes must match except in dim " << dim << ": tensor 0 is " << shape_str(first.sizes())
                                                 << ", tensor " << i << " is " << shape_str(t.sizes()));
    total += t.sizes()[dim];
  }
  // Each piece padded with zeros to its place, then summed: pad's gradient is
  // narrow, so each input's gradient is its slice of the output's.
  Tensor out;
  int64_t before = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = t.sizes()[dim];
    Tensor placed = pad(t, dim, before, total - before - n);
    out = out.defined() ? add(out, placed) : placed;
    before += n;
  }
  return keep_dtype(out, first.dtype());
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  VOLT_CHECK(!tensors.empty(), "stack", "expected a non-empty list of tensors");
  check_defined(tensors[0], "stack");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "stack");
    VOLT_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack",
               "expected tensors of one shape, got " << shape_str(tensors[0].sizes()) << " (tensor 0) and "
                                                     << shape_str(tensors[i].sizes()) << " (tensor " << i << ")");
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(x, "split");
  check_has_dims(x, "split");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    VOLT_CHECK(s >= 0, "split", "split sizes must be non-negative, got " << s);
    // Each size within the dim, so that their sum cannot overflow.
    VOLT_CHECK(s <= x.sizes()[dim], "split",
               "split size " << s << " is larger than dim " << dim << " of size " << x.sizes()[dim]);
    total += s;
  }
  VOLT_CHECK(total == x.sizes()[dim], "split",
             "split sizes add up to " << total << " but dim " << dim << " has size " << x.sizes()[dim]);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(x.narrow(dim, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined(x, "split");
  VOLT_CHECK(split_size > 0, "split", "split_size must be positive, got " << split_size);
  check_has_dims(x, "split");
  dim = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.sizes()[dim];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined(x, "chunk");
  VOLT_CHECK(chunks > 0, "chunk", "the number of chunks must be positive, got " << chunks);
  check_has_dims(x, "chunk");
  dim = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.sizes()[dim];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined(x, "masked_fill");
  check_defined(mask, "masked_fill");
  VOLT_CHECK(mask.dtype() == DType::b8, "masked_fill", "expected a bool mask, got " << dtype_name(mask.dtype()));
  VOLT_CHECK(mask.device() == x.device(), "masked_fill",
             "the mask is on " << mask.device().str() << " but the input on " << x.device().str());
  Shape s = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  VOLT_CHECK(s == x.sizes(), "masked_fill",
             "mask of shape " << shape_str(mask.sizes()) << " does not broadcast to the input's "
                              << shape_str(x.sizes()));
  return keep_dtype(where(mask, scalar_for(x, value.value, "masked_fill"), x), x.dtype());
}

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined(x, "clamp");
  VOLT_CHECK(min || max, "clamp", "at least one of min and max must be given");
  // The result's dtype promotes as PyTorch's: a floating bound makes an
  // integer (or bool) tensor's result f32, an integer bound a bool tensor's
  // i64; a bound of the tensor's own kind keeps its dtype and must fit it.
  DType rt = x.dtype();
  for (const std::optional<Scalar>* b : {&min, &max})
    if (*b && (*b)->kind > scalar_kind(rt)) rt = (*b)->default_dtype();
  const Tensor xr = rt == x.dtype() ? x : convert_element_type(x, rt);
  // where() rather than maximum/minimum: the gradient passes wherever x lies
  // inside [min, max] (bounds included) and is 0 outside, as PyTorch's.
  Tensor r = xr;
  if (min) r = where(lt(xr, scalar_for(xr, min->value, "clamp")), scalar_for(xr, min->value, "clamp"), r);
  if (max) r = where(gt(xr, scalar_for(xr, max->value, "clamp")), scalar_for(xr, max->value, "clamp"), r);
  return keep_dtype(r, rt);
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "max");
  dim = wrap_dim(dim, x.dim(), "max");
  return {amax(x, {dim}, keepdim), argmax(x, dim, keepdim)};
}

std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "min");
  dim = wrap_dim(dim, x.dim(), "min");
  return {amin(x, {dim}, keepdim), argmin(x, dim, keepdim)};
}

Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined(a, "allclose");
  check_defined(b, "allclose");
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  // In f64, so that integer differences cannot overflow.
  Tensor x = convert_element_type(a, DType::f64), y = convert_element_type(b, DType::f64);
  if (y.device() != x.device()) y = y.to(x.device());
  Tensor close = le(abs(sub(x, y)), add(mul(abs(y), rtol), atol));
  Tensor ok = logical_or(eq(x, y), close);  // equal infinities are close
  if (equal_nan) ok = logical_or(ok, logical_and(ne(x, x), ne(y, y)));
  return all_of(ok).item<int64_t>() == shape_numel(s);
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal");
  check_defined(b, "equal");
  if (a.sizes() != b.sizes()) return false;
  Tensor y = b.device() == a.device() ? b : b.to(a.device());
  return all_of(eq(a, y)).item<int64_t>() == a.numel();
}

}  // namespace volt
