// The ops users call.  Each one builds an OpCall and hands it to dispatch().
// Shapes broadcast as in NumPy; dtypes promote as in PyTorch.
//   add(a, b): a (2, 1, 4), b (3, 1) -> (2, 3, 4)
#pragma once
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/tensor.h>

namespace volt {

// ---- elementwise ----
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor reciprocal(const Tensor& a);
Tensor logical_not(const Tensor& a);
Tensor erf(const Tensor& a);

Tensor add(const Value& a, const Value& b);
Tensor sub(const Value& a, const Value& b);
Tensor mul(const Value& a, const Value& b);
Tensor div(const Value& a, const Value& b);
Tensor pow(const Value& a, const Value& b);
Tensor maximum(const Value& a, const Value& b);
Tensor minimum(const Value& a, const Value& b);
Tensor logical_and(const Value& a, const Value& b);
Tensor logical_or(const Value& a, const Value& b);
Tensor eq(const Value& a, const Value& b);
Tensor ne(const Value& a, const Value& b);
Tensor lt(const Value& a, const Value& b);
Tensor le(const Value& a, const Value& b);
Tensor gt(const Value& a, const Value& b);
Tensor ge(const Value& a, const Value& b);
Tensor where(const Value& cond, const Value& a, const Value& b);
Tensor convert_element_type(const Tensor& a, DType dtype);

// ---- factories as ops (recorded by tracers) ----
Tensor full(const Shape& shape, double value, DType dtype, Device device);
// U[low, high) from Philox; seed/offset taken from the global generator.
Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device);
// U[low, high) for a given Philox key and first counter (a tracer keeps it, relative to its program's).
Tensor uniform_philox(const Shape& shape, double low, double high, DType dtype, Device device,
                      uint64_t seed, uint64_t offset);

// ---- shape ----
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor expand(const Tensor& a, const Shape& shape);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor contiguous(const Tensor& a);
// Zeros before and after along `dim`: (.., n, ..) -> (.., before + n + after, ..)
Tensor pad(const Tensor& a, int64_t dim, int64_t before, int64_t after);
// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- reductions (empty dims = all dims) ----
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false,
           int64_t correction = 1);

// ---- linear algebra ----
// matmul: 1-D, 2-D and batched (leading dims broadcast).  (M, K) x (K, N) -> (M, N)
Tensor matmul(const Tensor& a, const Tensor& b);
// linear: x (*, in), weight (out, in), bias (out) or undefined -> (*, out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- neural-network ops (composites; nn::functional re-exports them) ----
Tensor relu(const Tensor& a);
// Keeps each element with probability 1-p and scales by 1/(1-p); identity when !training.
Tensor dropout(const Tensor& a, double p, bool training);
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
// logp (N, C), target (N) integer classes -> -w[target[i]] logp[i, target[i]]
// reduced over the rows whose target is not ignore_index; Mean divides by the
// sum of those rows' weights.  weight (C) is optional (undefined: all ones).  The
// arguments in LibTorch's order, so that nll_loss(x, t, {}) means "no weight".
Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight = Tensor(),
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// logits (N, C), target (N) -> the row losses log(sum_j exp(logits[i, j])) - logits[i, target[i]],
// reduced (mean by default); ignore_index and label smoothing as PyTorch has
// them (tensor/cross_entropy.h).  () for Mean and Sum, (N) for None.
// A composite (log_softmax, then the row losses) that eager mode runs as one
// fused kernel where the device has one (tensor/cross_entropy.inc).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// The gradient of cross_entropy with respect to the logits, given the loss's
// gradient g (a scalar, or (N) for Reduction::None): per row,
// g_i * (softmax(logits)_i - (1 - e) onehot(target_i) - e/C), divided by the
// number of rows not ignored for Mean, 0 for ignored rows.
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& target,
                              const CrossEntropyOptions& options = {});

// ---- transformer ops (composites with a row of their own: a trace names them) ----
// gelu: x * Phi(x) with the exact normal CDF (erf), or approximate = "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// x (*, normalized_shape...): normalised over the last normalized_shape.size()
// dims with the biased variance, then * weight + bias (each optional, of
// shape normalized_shape).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// weight (V, D), index (*) integers in [0, V) -> (*, D), the rows of weight.
// Its weight gradient adds each output row's gradient into its index's row.
// With padding_idx >= 0 that row's gradient is always zero (its forward value
// is still the row); a negative padding_idx means none, as torch::embedding
// (nn::Embedding and nn::functional::embedding count a negative one from the end).
Tensor embedding(const Tensor& weight, const Tensor& index, int64_t padding_idx = -1);
// index: (k) integers -> x's slices index[0], ..., index[k-1] along dim, stacked
// along dim (the other dims kept); for a floating x gradients add into the
// slices picked; an integer or bool x is picked exactly (tensor/index_select.cpp).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// ---- joining, splitting, masks (compositions of prims, tensor/shape_ops.cpp) ----
// tensors of one dtype and device, equal sizes except along dim -> joined along dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// tensors of one shape S -> (.., len, ..) with the new dim at `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views along dim of split_size each (the last may be shorter), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// At most `chunks` views of ceil(n / chunks) each along dim.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// x where mask is false, value where it is true (mask b8, broadcast to x).
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
// The lower (upper) triangle of the last two dims: j - i <= diagonal (>= for triu), else 0.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// min(max(x, min), max); its gradient passes where min <= x <= max.  The
// result's dtype is PyTorch's promotion of x's with the bounds': clamp(i64
// tensor, 0.5) is f32 (the bound is not truncated), clamp(i64 tensor, 2) i64.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
// (values, indices) of the largest (smallest) element along dim.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// |a - b| <= atol + rtol |b| everywhere (broadcast); reads the values.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape and equal values.
bool equal(const Tensor& a, const Tensor& b);

// ---- C++ operators ----
inline Tensor operator-(const Tensor& a) { return neg(a); }
#define VOLT_BINARY_OPERATOR(sym, fn)                                                    \
  inline Tensor operator sym(const Tensor& a, const Tensor& b) { return fn(a, b); }      \
  inline Tensor operator sym(const Tensor& a, Scalar b) { return fn(a, Value(b)); }      \
  inline Tensor operator sym(Scalar a, const Tensor& b) { return fn(Value(a), b); }
VOLT_BINARY_OPERATOR(+, add)
VOLT_BINARY_OPERATOR(-, sub)
VOLT_BINARY_OPERATOR(*, mul)
VOLT_BINARY_OPERATOR(/, div)
VOLT_BINARY_OPERATOR(==, eq)
VOLT_BINARY_OPERATOR(!=, ne)
VOLT_BINARY_OPERATOR(<, lt)
VOLT_BINARY_OPERATOR(<=, le)
VOLT_BINARY_OPERATOR(>, gt)
VOLT_BINARY_OPERATOR(>=, ge)
VOLT_BINARY_OPERATOR(&&, logical_and)
VOLT_BINARY_OPERATOR(||, logical_or)
#undef VOLT_BINARY_OPERATOR
inline Tensor operator!(const Tensor& a) { return logical_not(a); }

}  // namespace volt
