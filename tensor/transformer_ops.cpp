// The composite ops a transformer needs beyond the MLP's: gelu, layer_norm and
// embedding (and scaled_dot_product_attention, whose decomposition is in
// tensor/attention.cpp beside its tiled kernels).  Each is a row of the op table (so a trace prints it with its
// prims underneath) and a decomposition into prims here, from which eager
// autograd, the jit's grad pass, the lazy device and the CUDA backend follow.
#include <algorithm>
#include <cmath>
#include <string>

#include <volt/tensor/attention.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/value_range.h>

namespace volt {

namespace {

Tensor call1(OpId op, std::vector<Value> args, Attrs attrs) {
  return dispatch1(OpCall{op, std::move(args), std::move(attrs)});
}

// embedding's index check, as an op: (index, rows) -> index, after checking
// that every index lies in [0, rows).  Eager mode runs it at once; a trace or
// a lazy graph runs it when the indices' values exist.
int64_t index_range_check() {
  static const int64_t id = [] {
    CustomOpDef def;
    def.name = "check_embedding_index";
    def.meta = meta_like_first_argument(def.name);
    def.kernel = [](const std::vector<Value>& args) {
      const Tensor& index = args.at(0).tensor;
      const int64_t rows = static_cast<int64_t>(args.at(1).scalar.value);
      if (index.numel() > 0) {
        int64_t lo = 0, hi = 0;
        auto note = [&, first = true](int64_t v) mutable {
          lo = first ? v : std::min(lo, v);
          hi = first ? v : std::max(hi, v);
          first = false;
        };
        if (index.device().is_cpu() && index.is_contiguous()) {
          // Read in place: a compiled training step allocates nothing per step.
          VOLT_DISPATCH_DTYPE(index.dtype(), [&] {
            const scalar_t* p = static_cast<const scalar_t*>(index.raw_data());
            for (int64_t i = 0; i < index.numel(); ++i) note(static_cast<int64_t>(p[i]));
          });
        } else {
          for (int64_t v : index.to(kCPU).to_vector<int64_t>()) note(v);
        }
        VOLT_CHECK(lo >= 0 && hi < rows, "embedding",
                   "index out of range: indices must lie in [0, " << rows << "), got values in [" << lo
                                                                  << ", " << hi << "]");
      }
      return std::vector<Tensor>{index};
    };
    return register_custom_op(std::move(def));
  }();
  return id;
}

// The weight as it is, its gradient's row padding_idx zeroed: (weight (V, D),
// padding_idx) -> weight.  The row still takes part in the forward (a table
// loaded with a non-zero padding row gives it back, as PyTorch's); only the
// gradient that the one-hot product scatters into it is dropped, so the
// optimizer never moves it.
int64_t padding_row_grad() {
  static const int64_t id = [] {
    CustomOpDef def;
    def.name = "zero_padding_grad";
    def.arg_names = {"weight", "padding_idx"};
    def.meta = meta_like_first_argument(def.name);
    // A new handle on the weight's memory (no copy): autograd gives the output
    // its own history, which must not become the weight's (a leaf).
    def.kernel = [](const std::vector<Value>& args) { return std::vector<Tensor>{args.at(0).tensor.detach()}; };
    // g (V, D) -> g with row padding_idx set to 0
    def.vjp = [](const std::vector<Value>& args, const std::vector<Tensor>& grads) {
      const Tensor& g = grads.at(0);
      const int64_t rows = g.sizes()[0];
      Tensor row = Tensor::arange(static_cast<double>(rows), DType::i64, g.device()).unsqueeze(1);
      Tensor pad = eq(row, Scalar(static_cast<int64_t>(args.at(1).scalar.value)));
      return std::vector<Tensor>{where(pad, Scalar(0.0), g), Tensor()};
    };
    return register_custom_op(std::move(def));
  }();
  return id;
}

Tensor gelu_decomposition(const Tensor& x, bool tanh_approx) {
  if (!tanh_approx) {
    // 0.5 x (1 + erf(x / sqrt(2)))
    return mul(mul(x, 0.5), add(erf(mul(x, M_SQRT1_2)), 1.0));
  }
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const double k = std::sqrt(2.0 / M_PI);
  Tensor inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), k);
  return mul(mul(x, 0.5), add(tanh(inner), 1.0));
}

// x (*, normalized...) over the last k dims; weight and bias (normalized...) if present.
Tensor layer_norm_decomposition(const OpCall& call) {
  const Tensor& x = call.args[0].tensor;
  const int64_t k = call.attrs.ints[0];
  const bool has_w = call.attrs.ints[1] != 0, has_b = call.attrs.ints[2] != 0;
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor m = mean(x, dims, true);
  Tensor d = sub(x, m);
  Tensor v = mean(mul(d, d), dims, true);  // the biased variance, as PyTorch normalises
  Tensor y = mul(d, rsqrt(add(v, call.attrs.a)));
  size_t i = 1;
  if (has_w) y = mul(y, call.args[i++].tensor);
  if (has_b) y = add(y, call.args[i].tensor);
  return y;
}

// weight (V, D), index (*) -> (*, D): a one-hot (N, V) times the weight, so the
// weight's gradient, one-hot^T (V, N) times the output's, is the scatter-add.
// padding_idx: the row whose gradient is zero, or negative for none.
Tensor embedding_decomposition(const Tensor& weight, const Tensor& index, int64_t padding_idx) {
  const int64_t rows = weight.sizes()[0];
  Tensor checked = dispatch1(custom_call(index_range_check(), {index, Scalar(rows)}));
  // Compared in i64 where the index dtype cannot count the rows (u8 indices
  // of a table of 300: a u8 arange would wrap, and row 5 would match 261).
  const DType cmp = holds_value(index.dtype(), static_cast<double>(rows - 1)) ? index.dtype() : DType::i64;
  if (checked.dtype() != cmp) checked = convert_element_type(checked, cmp);
  Tensor classes = Tensor::arange(static_cast<double>(rows), cmp, weight.device());
  Tensor flat = reshape(checked, {index.numel(), 1});
  Tensor onehot = convert_element_type(eq(flat, classes), weight.dtype());
  Shape out = index.sizes();
  out.push_back(weight.sizes()[1]);
  const Tensor table = padding_idx >= 0 ? dispatch1(custom_call(padding_row_grad(), {weight, Scalar(padding_idx)})) : weight;
  return reshape(matmul(onehot, table), out);
}

}  // namespace

std::vector<Tensor> transformer_decomposition(const OpCall& call) {
  switch (call.op) {
    case OpId::gelu: return {gelu_decomposition(call.args[0].tensor, call.attrs.flag)};
    case OpId::layer_norm: return {layer_norm_decomposition(call)};
    case OpId::embedding:
      return {embedding_decomposition(call.args[0].tensor, call.args[1].tensor,
                                      call.attrs.ints.empty() ? -1 : call.attrs.ints[0])};
    case OpId::scaled_dot_product_attention: return {attention_decomposition(call)};
    case OpId::scaled_dot_product_attention_backward: return attention_backward_decomposition(call);
    default: VOLT_FAIL(op_name(call.op), "is not a transformer op");
  }
}

Tensor erf(const Tensor& a) {
  VOLT_CHECK(a.defined(), "erf", "got an undefined tensor");
  return call1(OpId::erf, {a}, {});
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  VOLT_CHECK(x.defined(), "gelu", "got an undefined tensor");
  VOLT_CHECK(approximate == "none" || approximate == "tanh", "gelu",
             "approximate must be \"none\" or \"tanh\", got \"" << approximate << "\"");
  VOLT_CHECK(is_floating(x.dtype()), "gelu", "expected a floating tensor, got " << dtype_name(x.dtype()));
  Attrs at;
  at.flag = approximate == "tanh";
  return call1(OpId::gelu, {x}, at);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  VOLT_CHECK(x.defined(), "layer_norm", "got an undefined input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  VOLT_CHECK(k >= 1 && k <= x.dim(), "layer_norm",
             "normalized_shape " << shape_str(normalized_shape) << " needs 1 to " << x.dim()
                                 << " dims for an input of shape " << shape_str(x.sizes()));
  const Shape tail(x.sizes().end() - k, x.sizes().end());
  VOLT_CHECK(tail == normalized_shape, "layer_norm",
             "expected input with shape [*, " << shape_str(normalized_shape).substr(1) << ", got input of shape "
                                              << shape_str(x.sizes()));
  VOLT_CHECK(is_floating(x.dtype()), "layer_norm", "expected a floating input, got " << dtype_name(x.dtype()));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* what = p == &weight ? "weight" : "bias";
    VOLT_CHECK(p->sizes() == normalized_shape, "layer_norm",
               what << " of shape " << shape_str(p->sizes()) << " does not match normalized_shape "
                    << shape_str(normalized_shape));
    VOLT_CHECK(p->dtype() == x.dtype() && p->device() == x.device(), "layer_norm",
               what << " is " << p->meta_str() << " but the input is " << x.meta_str());
  }
  Attrs at;
  at.ints = {k, weight.defined() ? 1 : 0, bias.defined() ? 1 : 0};
  at.a = eps;
  std::vector<Value> args{x};
  if (weight.defined()) args.push_back(weight);
  if (bias.defined()) args.push_back(bias);
  return call1(OpId::layer_norm, std::move(args), at);
}

Tensor embedding(const Tensor& weight, const Tensor& index, int64_t padding_idx) {
  VOLT_CHECK(index.defined() && weight.defined(), "embedding", "got an undefined tensor");
  VOLT_CHECK(weight.dim() == 2, "embedding", "expected a weight (num_embeddings, dim), got "
                                                 << shape_str(weight.sizes()));
  VOLT_CHECK(is_integral(index.dtype()), "embedding",
             "expected integer indices, got " << dtype_name(index.dtype()));
  VOLT_CHECK(is_floating(weight.dtype()), "embedding",
             "expected a floating weight, got " << dtype_name(weight.dtype()));
  VOLT_CHECK(index.device() == weight.device(), "embedding",
             "indices on " << index.device().str() << " but the weight on " << weight.device().str());
  VOLT_CHECK(padding_idx < weight.sizes()[0], "embedding",
             "padding_idx " << padding_idx << " is out of range for a table of " << weight.sizes()[0] << " rows");
  Attrs at;
  if (padding_idx >= 0) at.ints = {padding_idx};
  return call1(OpId::embedding, {weight, index}, at);
}

}  // namespace volt
