#include <volt/tensor/ops.h>

#include <algorithm>
#include <numeric>

#include <volt/tensor/random.h>
#include <volt/tensor/value_range.h>

namespace volt {

static Tensor call1(OpId op, std::vector<Value> args, Attrs attrs = {}) {
  return dispatch1(OpCall{op, std::move(args), std::move(attrs)});
}

static void check_tensor(const Tensor& t, const char* op) {
  VOLT_CHECK(t.defined(), op, "got an undefined tensor");
}

#define VOLT_UNARY(name) \
  Tensor name(const Tensor& a) { check_tensor(a, #name); return call1(OpId::name, {a}); }
VOLT_UNARY(neg)
VOLT_UNARY(abs)
VOLT_UNARY(exp)
VOLT_UNARY(log)
VOLT_UNARY(sqrt)
VOLT_UNARY(rsqrt)
VOLT_UNARY(tanh)
VOLT_UNARY(sigmoid)
VOLT_UNARY(reciprocal)
VOLT_UNARY(logical_not)
#undef VOLT_UNARY

#define VOLT_BINARY(name) \
  Tensor name(const Value& a, const Value& b) { return call1(OpId::name, {a, b}); }
VOLT_BINARY(add)
VOLT_BINARY(sub)
VOLT_BINARY(mul)
VOLT_BINARY(div)
VOLT_BINARY(pow)
VOLT_BINARY(maximum)
VOLT_BINARY(minimum)
VOLT_BINARY(logical_and)
VOLT_BINARY(logical_or)
VOLT_BINARY(eq)
VOLT_BINARY(ne)
VOLT_BINARY(lt)
VOLT_BINARY(le)
VOLT_BINARY(gt)
VOLT_BINARY(ge)
#undef VOLT_BINARY

Tensor where(const Value& c, const Value& a, const Value& b) {
  return call1(OpId::where, {c, a, b});
}

Tensor convert_element_type(const Tensor& a, DType dtype) {
  check_tensor(a, "convert_element_type");
  Attrs at;
  at.dtype = dtype;
  return call1(OpId::convert_element_type, {a}, at);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  // As in PyTorch: an integer tensor cannot hold NaN, Inf or a value past its range
  // (and converting such a double is undefined behaviour in C++).
  VOLT_CHECK(holds_value(dtype, value), "full",
             "value " << value << " cannot be converted to " << dtype_name(dtype) << " without overflow");
  Attrs at;
  at.ints = shape;
  at.a = value;
  at.dtype = dtype;
  at.device = device;
  return call1(OpId::full, {}, at);
}

namespace {

Tensor uniform_call(const Shape& shape, double low, double high, DType dtype, Device device, uint64_t seed,
                    uint64_t offset, bool fixed) {
  Attrs at;
  at.ints = shape;
  at.a = low;
  at.b = high;
  at.dtype = dtype;
  at.device = device;
  at.seed = seed;
  at.offset = offset;
  at.rng_slot = fixed ? 0 : -1;
  return call1(OpId::uniform, {}, at);
}

}  // namespace

Tensor uniform_philox(const Shape& shape, double low, double high, DType dtype, Device device,
                      uint64_t seed, uint64_t offset) {
  return uniform_call(shape, low, high, dtype, device, seed, offset, true);
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device) {
  // Under a tracer the draw's counters are assigned when the program runs, so the
  // global generator is left alone here; eagerly they are reserved now.
  if (current_mode() != nullptr) return uniform_call(shape, low, high, dtype, device, 0, 0, false);
  PhiloxState st = rng_reserve(static_cast<uint64_t>(shape_numel(shape)));
  return uniform_call(shape, low, high, dtype, device, st.seed, st.offset, false);
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  check_tensor(a, "reshape");
  if (a.sizes() == shape) return a;
  Attrs at;
  at.ints = shape;
  return call1(OpId::reshape, {a}, at);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  check_tensor(a, "permute");
  VOLT_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute",
             "got " << dims.size() << " dims for a tensor of " << a.dim() << " dims");
  Attrs at;
  std::vector<bool> seen(dims.size(), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, a.dim(), "permute");
    VOLT_CHECK(!seen[w], "permute", "dim " << w << " repeats");
    seen[w] = true;
    at.ints.push_back(w);
  }
  bool identity = true;
  for (size_t i = 0; i < at.ints.size(); ++i) identity &= at.ints[i] == static_cast<int64_t>(i);
  if (identity) return a;
  return call1(OpId::permute, {a}, at);
}

Tensor expand(const Tensor& a, const Shape& shape) {
  check_tensor(a, "expand");
  VOLT_CHECK(shape.size() >= a.sizes().size(), "expand",
             "cannot expand " << shape_str(a.sizes()) << " to fewer dims " << shape_str(shape));
  Shape s = shape;
  size_t lead = s.size() - a.sizes().size();
  for (size_t i = 0; i < a.sizes().size(); ++i)
    if (s[lead + i] == -1) s[lead + i] = a.sizes()[i];
  if (s == a.sizes()) return a;
  Attrs at;
  at.ints = s;
  return call1(OpId::expand, {a}, at);
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  check_tensor(a, "narrow");
  VOLT_CHECK(a.dim() > 0, "narrow", "expected a tensor of at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "narrow");
  int64_t n = a.sizes()[dim];
  if (start < 0) start += n;
  VOLT_CHECK(start >= 0 && length >= 0 && start <= n && length <= n - start, "narrow",
             "range [" << start << ", " << static_cast<double>(start) + static_cast<double>(length)
                       << ") is out of bounds for dim " << dim << " of size " << n);
  if (start == 0 && length == n) return a;
  Attrs at;
  at.ints = {dim, start, length};
  return call1(OpId::narrow, {a}, at);
}

Tensor contiguous(const Tensor& a) {
  check_tensor(a, "contiguous");
  return call1(OpId::copy, {a});
}

Tensor pad(const Tensor& a, int64_t dim, int64_t before, int64_t after) {
  check_tensor(a, "pad");
  VOLT_CHECK(before >= 0 && after >= 0, "pad", "negative padding " << before << ", " << after);
  VOLT_CHECK(a.dim() > 0, "pad", "expected a tensor of at least 1 dim, got a 0-dim tensor");
  Attrs at;
  at.ints = {wrap_dim(dim, a.dim(), "pad"), before, after};
  return call1(OpId::pad, {a}, at);
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.sizes() == shape) return a;
  size_t lead = a.sizes().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < a.sizes().size(); ++i) {
    if (i < lead) dims.push_back(static_cast<int64_t>(i));
    else if (shape[i - lead] == 1 && a.sizes()[i] != 1) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? a : sum(a, dims, true);
  return reshape(r, shape);
}

static Tensor reduce(OpId op, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  check_tensor(a, op_name(op));
  Attrs at;
  if (dims.empty() || a.dim() == 0) {
    // A zero-dim tensor reduces over nothing (dim 0 and -1 are accepted, as in PyTorch).
    for (int64_t d : dims) wrap_dim(d, a.dim(), op_name(op));
    for (int64_t i = 0; i < a.dim(); ++i) at.ints.push_back(i);
  } else {
    for (int64_t d : dims) at.ints.push_back(wrap_dim(d, a.dim(), op_name(op)));
    std::sort(at.ints.begin(), at.ints.end());
    VOLT_CHECK(std::adjacent_find(at.ints.begin(), at.ints.end()) == at.ints.end(), op_name(op),
               "a dim appears twice in the list of dims");
  }
  at.flag = keepdim;
  return call1(op, {a}, at);
}

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(OpId::sum, a, dims, keepdim);
}
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(OpId::amax, a, dims, keepdim);
}
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(OpId::amin, a, dims, keepdim);
}
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce(OpId::argmax, a, {dim}, keepdim);
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce(OpId::argmin, a, {dim}, keepdim);
}

static Attrs dims_attrs(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim,
                        const char* op) {
  Attrs at;
  if (dims.empty())
    for (int64_t i = 0; i < a.dim(); ++i) at.ints.push_back(i);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, a.dim(), op);
    if (a.dim() > 0) at.ints.push_back(w);  // a zero-dim tensor reduces over nothing
  }
  at.flag = keepdim;
  return at;
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  check_tensor(a, "mean");
  return call1(OpId::mean, {a}, dims_attrs(a, dims, keepdim, "mean"));
}

Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  check_tensor(a, "var");
  Attrs at = dims_attrs(a, dims, keepdim, "var");
  at.a = static_cast<double>(correction);
  return call1(OpId::var, {a}, at);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_tensor(a, "matmul");
  check_tensor(b, "matmul");
  return call1(OpId::matmul, {a, b});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_tensor(x, "linear");
  check_tensor(weight, "linear");
  std::vector<Value> args{x, weight};
  if (bias.defined()) args.push_back(bias);
  return call1(OpId::linear, std::move(args));
}

Tensor relu(const Tensor& a) {
  check_tensor(a, "relu");
  return call1(OpId::relu, {a});
}

Tensor dropout(const Tensor& a, double p, bool training) {
  check_tensor(a, "dropout");
  VOLT_CHECK(p >= 0 && p <= 1, "dropout", "probability has to be between 0 and 1, got " << p);
  if (!training || p == 0) return a;
  Attrs at;
  at.a = p;
  at.flag = training;
  return call1(OpId::dropout, {a}, at);
}

Tensor softmax(const Tensor& a, int64_t dim) {
  check_tensor(a, "softmax");
  Attrs at;
  at.ints = {wrap_dim(dim, a.dim(), "softmax")};
  return call1(OpId::softmax, {a}, at);
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  check_tensor(a, "log_softmax");
  Attrs at;
  at.ints = {wrap_dim(dim, a.dim(), "log_softmax")};
  return call1(OpId::log_softmax, {a}, at);
}

namespace {

void check_options(const CrossEntropyOptions& o, const char* op) {
  const auto r = static_cast<int64_t>(o.reduction);
  VOLT_CHECK(r >= 0 && r <= 2, op, "unknown reduction " << r << "; expected None, Mean or Sum");
  VOLT_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op,
             "label_smoothing must lie in [0, 1], got " << o.label_smoothing);
}

Attrs options_attrs(const CrossEntropyOptions& o, const char* op) {
  check_options(o, op);
  Attrs at;
  set_cross_entropy_attrs(at, o);
  return at;
}

}  // namespace

namespace {
// The class-weighted loss as a composite of ops (so it differentiates and
// traces like any other): w_i = weight[target_i] on the rows not ignored, 0 on
// the rest; Mean divides by the sum of the w_i, as PyTorch's.
Tensor weighted_nll_loss(const Tensor& logp, const Tensor& given, const Tensor& weight, Reduction reduction,
                         int64_t ignore_index) {
  VOLT_CHECK(logp.dim() == 2 && given.dim() == 1 && given.size(0) == logp.size(0), "nll_loss",
             "with a weight, expected logp (N, C) and target (N), got " << shape_str(logp.sizes()) << " and "
                                                                        << shape_str(given.sizes()));
  const int64_t classes = logp.size(1);
  VOLT_CHECK(weight.dim() == 1 && weight.size(0) == classes, "nll_loss",
             "weight must be (C) = (" << classes << "), got " << shape_str(weight.sizes()));
  VOLT_CHECK(weight.dtype() == logp.dtype() && weight.device() == logp.device(), "nll_loss",
             "weight must have logp's dtype and device (" << logp.meta_str() << "), got " << weight.meta_str());
  // The unweighted row losses check the targets (integers in [0, C)) and zero the ignored rows.
  const Tensor rows = nll_loss(logp, given, Tensor(), Reduction::None, ignore_index);  // (N)
  // In i64: a u8 target would wrap ignore_index and a u8 arange past 255 classes.
  const Tensor target = given.dtype() == DType::i64 ? given : convert_element_type(given, DType::i64);
  const Tensor kept = ne(target, Value(ignore_index));                                       // (N) bool
  const Tensor cls = where(kept, target, Value(int64_t{0})).unsqueeze(1);                   // (N, 1)
  const Tensor onehot = eq(cls, Tensor::arange(classes, DType::i64, logp.device()));        // (N, C)
  const Tensor w = where(kept, sum(where(onehot, weight.unsqueeze(0), Value(0.0)), {1}), Value(0.0));
  const Tensor losses = mul(w, rows);
  if (reduction == Reduction::None) return losses;
  if (reduction == Reduction::Sum) return sum(losses);
  return div(sum(losses), sum(w));
}
}  // namespace

Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  check_tensor(logp, "nll_loss");
  check_tensor(target, "nll_loss");
  if (weight.defined()) return weighted_nll_loss(logp, target, weight, reduction, ignore_index);
  return call1(OpId::nll_loss, {logp, target}, options_attrs({reduction, ignore_index, 0.0}, "nll_loss"));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  check_tensor(logits, "cross_entropy");
  check_tensor(target, "cross_entropy");
  return call1(OpId::cross_entropy, {logits, target}, options_attrs(options, "cross_entropy"));
}

Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& target,
                              const CrossEntropyOptions& options) {
  check_tensor(g, "cross_entropy_backward");
  check_tensor(logits, "cross_entropy_backward");
  check_tensor(target, "cross_entropy_backward");
  return call1(OpId::cross_entropy_backward, {g, logits, target}, options_attrs(options, "cross_entropy_backward"));
}

}  // namespace volt
