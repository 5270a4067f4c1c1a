// scaled_dot_product_attention: the op, its decomposition into prims, and the
// device dispatch of the tiled kernels (tensor/cpu/attention.cpp,
// tensor/cuda/attention.cpp) that the jit's flash executor runs instead.
#include <volt/tensor/attention.h>

#include <cmath>
#include <limits>

#include <volt/tensor/cpu/attention.h>
#include <volt/tensor/ops.h>
#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/attention.h>
#endif

namespace volt {

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  VOLT_CHECK(q.defined() && k.defined() && v.defined(), op, "got an undefined tensor");
  VOLT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
             "expected query, key and value (batch, heads, T, head_dim), got "
                 << shape_str(q.sizes()) << ", " << shape_str(k.sizes()) << " and " << shape_str(v.sizes()));
  VOLT_CHECK(is_floating(q.dtype()), op, "expected a floating query, got " << dtype_name(q.dtype()));
  VOLT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             "query, key and value must have one dtype, got " << q.meta_str() << ", " << k.meta_str() << " and "
                                                              << v.meta_str());
  VOLT_CHECK(k.device() == q.device() && v.device() == q.device(), op,
             "query, key and value must be on one device, got " << q.meta_str() << ", " << k.meta_str()
                                                                 << " and " << v.meta_str());
  const Shape &qs = q.sizes(), &ks = k.sizes(), &vs = v.sizes();
  VOLT_CHECK(ks[0] == qs[0] && vs[0] == qs[0] && ks[1] == qs[1] && vs[1] == qs[1], op,
             "query, key and value must share batch and heads, got " << shape_str(qs) << ", " << shape_str(ks)
                                                                     << " and " << shape_str(vs));
  VOLT_CHECK(ks[3] == qs[3], op,
             "key's head_dim " << ks[3] << " differs from the query's " << qs[3] << " (query " << shape_str(qs)
                               << ", key " << shape_str(ks) << ")");
  VOLT_CHECK(vs[2] == ks[2], op,
             "value has " << vs[2] << " positions but the key has " << ks[2] << " (key " << shape_str(ks)
                          << ", value " << shape_str(vs) << ")");
  // Each query's softmax runs over the keys: none leaves it undefined.
  VOLT_CHECK(ks[2] > 0 || qs[2] == 0, op, "expected at least one key position, got key " << shape_str(ks));
}

namespace {

Attrs attention_attrs(const Tensor& q, const AttentionOptions& options, const char* op) {
  const double p = options.dropout_p;
  VOLT_CHECK(p >= 0 && p <= 1, op, "dropout_p has to be between 0 and 1, got " << p);
  VOLT_CHECK(options.scale || q.sizes()[3] > 0, op,
             "head_dim 0 has no default scale 1/sqrt(head_dim); got query " << shape_str(q.sizes()));
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.sizes()[3])));
  VOLT_CHECK(std::isfinite(scale), op, "scale must be finite, got " << scale);
  Attrs at;
  at.flag = options.causal;
  at.a = scale;
  at.b = p;
  return at;
}

// The attention weights softmax(q k^T scale, masked): (B, H, L, S).
Tensor attention_weights(const Tensor& q, const Tensor& k, const Attrs& at) {
  Tensor att = mul(matmul(q, k.transpose(2, 3)), at.a);
  if (at.flag) {
    const int64_t L = q.sizes()[2], S = k.sizes()[2];
    Tensor future = eq(tril(full({L, S}, 1.0, att.dtype(), att.device())), 0.0);  // (L, S) b8
    att = masked_fill(att, future, -std::numeric_limits<double>::infinity());
  }
  return softmax(att, -1);
}

// The dropout mask scaled by 1 / (1 - p), as `dropout` makes it (bf16 and f16
// draw in f32), from the counters the call names: under a tracer relative to
// the program's draws, where the tracer placed the op (or its forward).
Tensor scaled_mask(const Tensor& att, const Attrs& at) {
  const double keep = 1.0 - at.b;
  const DType draw = is_half(att.dtype()) ? DType::f32 : att.dtype();
  Tensor u = uniform_philox(att.sizes(), 0.0, 1.0, draw, att.device(), at.seed, at.offset);
  return mul(convert_element_type(lt(u, keep), att.dtype()), keep > 0 ? 1.0 / keep : 0.0);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  const char* op = "scaled_dot_product_attention";
  check_attention_inputs(q, k, v, op);
  return dispatch1(OpCall{OpId::scaled_dot_product_attention, {q, k, v}, attention_attrs(q, options, op)});
}

std::vector<Tensor> scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                                          const Tensor& v, const AttentionOptions& options,
                                                          const PhiloxState& mask) {
  const char* op = "scaled_dot_product_attention_backward";
  check_attention_inputs(q, k, v, op);
  Attrs at = attention_attrs(q, options, op);
  at.seed = mask.seed;
  at.offset = mask.offset;
  const Shape want{q.sizes()[0], q.sizes()[1], q.sizes()[2], v.sizes()[3]};
  VOLT_CHECK(grad_out.defined() && grad_out.sizes() == want && grad_out.dtype() == q.dtype(), op,
             "expected the output's gradient " << dtype_name(q.dtype()) << shape_str(want) << ", got "
                                               << (grad_out.defined() ? grad_out.meta_str() : "undefined"));
  return dispatch(OpCall{OpId::scaled_dot_product_attention_backward, {grad_out, q, k, v}, at});
}

bool attention_runs_whole(const OpCall& call) {
  return call.op == OpId::scaled_dot_product_attention || call.op == OpId::scaled_dot_product_attention_backward;
}

bool attention_draws(const OpCall& call) { return call.op == OpId::scaled_dot_product_attention && call.attrs.b > 0; }

uint64_t attention_mask_counters(const OpCall& call) {
  const bool backward = call.op == OpId::scaled_dot_product_attention_backward;
  const Shape& q = call.args.at(backward ? 1 : 0).tensor.sizes();
  const Shape& k = call.args.at(backward ? 2 : 1).tensor.sizes();
  return static_cast<uint64_t>(q.at(0) * q.at(1) * q.at(2) * k.at(2));
}

std::vector<TensorMeta> attention_meta(const OpCall& call) {
  const bool backward = call.op == OpId::scaled_dot_product_attention_backward;
  const size_t first = backward ? 1 : 0;
  VOLT_CHECK(call.args.size() == first + 3, op_name(call.op), "expected " << first + 3 << " tensors");
  const Tensor& q = call.args[first].tensor;
  const Tensor& k = call.args[first + 1].tensor;
  const Tensor& v = call.args[first + 2].tensor;
  check_attention_inputs(q, k, v, op_name(call.op));
  if (backward) return {{q.sizes(), q.dtype(), q.device()}, {k.sizes(), k.dtype(), k.device()},
                        {v.sizes(), v.dtype(), v.device()}};
  return {{{q.sizes()[0], q.sizes()[1], q.sizes()[2], v.sizes()[3]}, q.dtype(), q.device()}};
}

// q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev) -> (B, H, L, Ev), written as
// nn::CausalSelfAttention wrote it before, so its results stay bit for bit.
Tensor attention_decomposition(const OpCall& call) {
  const Tensor& q = call.args.at(0).tensor;
  const Tensor& k = call.args.at(1).tensor;
  const Tensor& v = call.args.at(2).tensor;
  check_attention_inputs(q, k, v, "scaled_dot_product_attention");
  Tensor att = attention_weights(q, k, call.attrs);
  if (call.attrs.b > 0)  // eagerly from the global generator, as `dropout` draws
    att = current_mode() == nullptr ? dropout(att, call.attrs.b, true) : mul(att, scaled_mask(att, call.attrs));
  return matmul(att, v);
}

// (g, q, k, v) -> {dq, dk, dv} with P the weights, recomputed, and M the
// forward's dropout mask scaled by 1 / (1 - p), drawn again (1 without dropout):
//   dv = (P o M)^T g,  dP = (g v^T) o M,  dS = P o (dP - rowsum(dP o P)),  dq = dS k scale,  dk = dS^T q scale
std::vector<Tensor> attention_backward_decomposition(const OpCall& call) {
  const Tensor& g = call.args.at(0).tensor;
  const Tensor& q = call.args.at(1).tensor;
  const Tensor& k = call.args.at(2).tensor;
  const Tensor& v = call.args.at(3).tensor;
  check_attention_inputs(q, k, v, "scaled_dot_product_attention_backward");
  Tensor p = attention_weights(q, k, call.attrs);
  Tensor m = call.attrs.b > 0 ? scaled_mask(p, call.attrs) : Tensor();
  Tensor dv = matmul((m.defined() ? mul(p, m) : p).transpose(2, 3), g);
  Tensor dp = matmul(g, v.transpose(2, 3));
  if (m.defined()) dp = mul(dp, m);
  Tensor ds = mul(p, sub(dp, sum(mul(dp, p), {3}, true)));
  return {mul(matmul(ds, k), call.attrs.a), mul(matmul(ds.transpose(2, 3), q), call.attrs.a), dv};
}

// ---------------------------------------------------------------- the tiled kernels

DType flash_lse_dtype(DType q) { return is_half(q) ? DType::f32 : q; }

namespace {

// f32 and f64 everywhere; bf16 and f16 on the CPU and CUDA devices (computed in f32 there).
void check_flash_dtype(const Tensor& q, const char* op) {
  const DType t = q.dtype();
  VOLT_CHECK(t == DType::f32 || t == DType::f64 || (is_half(t) && (q.device().is_cpu() || q.device().is_cuda())),
             op, "runs f32 and f64 (and bf16 and f16 on the CPU and CUDA devices), got " << q.meta_str());
}

}  // namespace

std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p) {
  check_attention_inputs(q, k, v, "flash_attention");
  check_flash_dtype(q, "flash_attention");
#ifdef VOLT_WITH_CUDA
  if (q.device().is_cuda()) return cuda::flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), p);
#endif
  VOLT_CHECK(q.device().is_cpu(), "flash_attention", "has no kernel for device " << q.device().str());
  return cpu::flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), p);
}

std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p) {
  check_attention_inputs(q, k, v, "flash_attention_backward");
  const Shape want_out{q.sizes()[0], q.sizes()[1], q.sizes()[2], v.sizes()[3]};
  VOLT_CHECK(grad_out.sizes() == want_out && out.sizes() == want_out && grad_out.dtype() == q.dtype() &&
                 out.dtype() == q.dtype(),
             "flash_attention_backward",
             "expected the output and its gradient " << dtype_name(q.dtype()) << shape_str(want_out) << ", got "
                                                     << out.meta_str() << " and " << grad_out.meta_str());
  check_flash_dtype(q, "flash_attention_backward");
  const DType lse_dtype = flash_lse_dtype(q.dtype());
  VOLT_CHECK(lse.sizes() == Shape(want_out.begin(), want_out.end() - 1) && lse.dtype() == lse_dtype,
             "flash_attention_backward",
             "expected lse " << dtype_name(lse_dtype) << shape_str(Shape(want_out.begin(), want_out.end() - 1))
                             << ", got " << lse.meta_str());
#ifdef VOLT_WITH_CUDA
  if (q.device().is_cuda())
    return cuda::flash_attention_backward(grad_out.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(),
                                          out.contiguous(), lse.contiguous(), p);
#endif
  VOLT_CHECK(q.device().is_cpu(), "flash_attention_backward", "has no kernel for device " << q.device().str());
  return cpu::flash_attention_backward(grad_out.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(),
                                       out.contiguous(), lse.contiguous(), p);
}

}  // namespace volt
