#include <volt/autograd/vjp.h>

#include <volt/tensor/attention.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/custom_op.h>

#include <cmath>
#include <numeric>

#include <volt/tensor/ops.h>

namespace volt::autograd {

namespace {

const Tensor& arg(const OpCall& c, size_t i) { return c.args[i].tensor; }

// Reduces a broadcast gradient back to the argument's shape and dtype.
Tensor fit(const Tensor& g, const Value& v) {
  if (!v.is_tensor) return Tensor();
  Tensor r = sum_to(g, v.tensor.sizes());
  if (r.dtype() != v.tensor.dtype() && is_floating(v.tensor.dtype()))
    r = convert_element_type(r, v.tensor.dtype());
  return r;
}

// The operand as something ops accept (tensor or scalar).
Value val(const OpCall& c, size_t i) { return c.args[i]; }

Tensor matmul_grad_a(const Tensor& a, const Tensor& b, const Tensor& g);
Tensor matmul_grad_b(const Tensor& a, const Tensor& b, const Tensor& g);

std::vector<Tensor> matmul_vjp(const OpCall& c, const Tensor& g) {
  // out_dtype=f32: the gradient of its f32 result, in the operands' bf16.
  const Tensor gl = c.attrs.flag && g.dtype() != arg(c, 0).dtype() ? convert_element_type(g, arg(c, 0).dtype()) : g;
  return {matmul_grad_a(arg(c, 0), arg(c, 1), gl), matmul_grad_b(arg(c, 0), arg(c, 1), gl)};
}

// The unary prims: d/da.
std::vector<Tensor> unary_vjp(const OpCall& c, const Tensor& g) {
  switch (c.op) {
    case OpId::neg: return {neg(g)};
    case OpId::abs: return {where(gt(arg(c, 0), 0.0), g, where(lt(arg(c, 0), 0.0), neg(g), 0.0))};
    case OpId::exp: return {mul(g, exp(arg(c, 0)))};
    case OpId::log: return {div(g, arg(c, 0))};
    case OpId::sqrt: return {div(g, mul(sqrt(arg(c, 0)), 2.0))};
    case OpId::tanh: {
      Tensor t = tanh(arg(c, 0));
      return {mul(g, sub(1.0, mul(t, t)))};
    }
    case OpId::sigmoid: {
      Tensor s = sigmoid(arg(c, 0));
      return {mul(g, mul(s, sub(1.0, s)))};
    }
    // d erf(a)/da = 2/sqrt(pi) exp(-a^2)
    case OpId::erf: return {mul(g, mul(exp(neg(mul(arg(c, 0), arg(c, 0)))), 1.1283791670955126))};
    default:
      VOLT_FAIL(op_name(c.op), "has no derivative");
  }
}

}  // namespace

namespace {

// The gradients of a composite that was recorded as one op, by one op of its own.
std::vector<Tensor> whole_composite_vjp(const OpCall& c, const Tensor& g) {
  const Attrs& at = c.attrs;
  if (c.op == OpId::cross_entropy)
    return {cross_entropy_backward(g, arg(c, 0), arg(c, 1), cross_entropy_options(at)), Tensor()};
  // With dropout, the forward's counters: the backward draws its mask again.
  return scaled_dot_product_attention_backward(g, arg(c, 0), arg(c, 1), arg(c, 2),
                                               {.causal = at.flag, .scale = at.a, .dropout_p = at.b},
                                               {at.seed, at.offset});
}

}  // namespace

bool is_differentiable(OpId op) {
  switch (op_info(op).kind) {
    case OpKind::Compare:
    case OpKind::Random:
    case OpKind::Factory:
      return false;
    default:
      return op != OpId::logical_not && op != OpId::logical_and && op != OpId::logical_or &&
             op != OpId::argmax && op != OpId::argmin;
  }
}

std::vector<Tensor> vjp(const OpCall& c, const Tensor& g) { return vjp(c, g, {}); }

std::vector<Tensor> vjp(const OpCall& c, const Tensor& g, const std::vector<Tensor>& outputs) {
  const Attrs& at = c.attrs;
  if (op_info(c.op).kind == OpKind::Unary) return unary_vjp(c, g);
  switch (c.op) {
    // ---- binary ----
    case OpId::add: return {fit(g, c.args[0]), fit(g, c.args[1])};
    case OpId::sub: return {fit(g, c.args[0]), c.args[1].is_tensor ? fit(neg(g), c.args[1]) : Tensor()};
    case OpId::mul:
      return {c.args[0].is_tensor ? fit(mul(g, val(c, 1)), c.args[0]) : Tensor(),
              c.args[1].is_tensor ? fit(mul(g, val(c, 0)), c.args[1]) : Tensor()};
    case OpId::div: {
      Tensor ga = c.args[0].is_tensor ? fit(div(g, val(c, 1)), c.args[0]) : Tensor();
      Tensor gb;
      if (c.args[1].is_tensor) {
        const Tensor& b = arg(c, 1);
        gb = fit(neg(div(mul(g, val(c, 0)), mul(b, b))), c.args[1]);
      }
      return {ga, gb};
    }
    case OpId::pow: {
      Tensor ga, gb;
      if (c.args[0].is_tensor) {
        Value bm1 = c.args[1].is_tensor ? Value(sub(arg(c, 1), 1.0)) : Value(c.args[1].scalar.value - 1.0);
        ga = fit(mul(mul(g, val(c, 1)), pow(val(c, 0), bm1)), c.args[0]);
      }
      if (c.args[1].is_tensor) {
        Tensor p = pow(val(c, 0), val(c, 1));
        Tensor la = c.args[0].is_tensor ? log(arg(c, 0)) : Tensor::scalar_tensor(std::log(c.args[0].scalar.value), arg(c, 1).dtype(), arg(c, 1).device());
        gb = fit(mul(mul(g, p), la), c.args[1]);
      }
      return {ga, gb};
    }
    case OpId::maximum:
    case OpId::minimum: {
      // Ties split the gradient evenly, as PyTorch does.
      Tensor win_a = c.op == OpId::maximum ? gt(val(c, 0), val(c, 1)) : lt(val(c, 0), val(c, 1));
      Tensor tie = eq(val(c, 0), val(c, 1));
      Tensor half = mul(g, 0.5);
      Tensor ga = where(win_a, g, where(tie, half, 0.0));
      Tensor gb = where(win_a, 0.0, where(tie, half, g));
      return {fit(ga, c.args[0]), fit(gb, c.args[1])};
    }

    case OpId::where:
      return {Tensor(), fit(where(val(c, 0), g, 0.0), c.args[1]), fit(where(val(c, 0), 0.0, g), c.args[2])};
    case OpId::convert_element_type: {
      DType in = arg(c, 0).dtype();
      if (!is_floating(in)) return {Tensor()};
      return {g.dtype() == in ? g : convert_element_type(g, in)};  // a wide gradient is in `in` already
    }

    // ---- shape ----
    case OpId::reshape: return {reshape(g, arg(c, 0).sizes())};
    case OpId::permute: {
      std::vector<int64_t> inv(at.ints.size());
      for (size_t i = 0; i < at.ints.size(); ++i) inv[at.ints[i]] = static_cast<int64_t>(i);
      return {permute(g, inv)};
    }
    case OpId::expand: return {sum_to(g, arg(c, 0).sizes())};
    case OpId::narrow: {
      int64_t dim = at.ints[0], start = at.ints[1], len = at.ints[2];
      int64_t n = arg(c, 0).sizes()[dim];
      return {pad(g, dim, start, n - start - len)};
    }
    case OpId::pad: return {narrow(g, at.ints[0], at.ints[1], arg(c, 0).sizes()[at.ints[0]])};
    case OpId::copy: return {g};

    // ---- reductions ----
    case OpId::sum: {
      const Tensor& a = arg(c, 0);
      Shape kept = a.sizes();
      for (int64_t d : at.ints) kept[d] = 1;
      return {expand(reshape(g, kept), a.sizes())};
    }
    case OpId::amax:
    case OpId::amin: {
      // The gradient goes to the extremal elements, shared among ties.
      const Tensor& a = arg(c, 0);
      Tensor m = c.op == OpId::amax ? amax(a, at.ints, true) : amin(a, at.ints, true);
      Tensor mask = convert_element_type(eq(a, m), a.dtype());
      Tensor count = sum(mask, at.ints, true);
      Shape kept = a.sizes();
      for (int64_t d : at.ints) kept[d] = 1;
      return {mul(div(mask, count), reshape(g, kept))};
    }

    // ---- linear algebra ----
    case OpId::matmul: return matmul_vjp(c, g);
    case OpId::linear: {
      // x (*, in), w (out, in), g (*, out)
      const Tensor& x = arg(c, 0);
      const Tensor& w = arg(c, 1);
      Tensor g2 = g.dim() == 2 ? g : g.reshape({-1, w.sizes()[0]});
      Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, w.sizes()[1]});
      std::vector<Tensor> r{matmul(g, w), matmul(g2.t(), x2)};
      if (c.args.size() == 3) r.push_back(sum(g2, {0}));
      return r;
    }
    // ---- windows: im2col and col2im are each other's adjoints ----
    case OpId::im2col:
      return {col2im(g, Window2d::from_ints(at.ints), arg(c, 0).size(2), arg(c, 0).size(3))};
    case OpId::col2im: return {im2col(g, Window2d::from_ints(at.ints))};
    case OpId::max_pool2d: return {max_pool2d_backward(g, arg(c, 0), Window2d::from_ints(at.ints))};
    // ---- convolution: linear in each operand; its gradient prims are its adjoints ----
    case OpId::convolution: {
      const Window2d w = Window2d::from_ints(at.ints);
      const Tensor& x = arg(c, 0);
      const Tensor& wt = arg(c, 1);
      const Tensor bias = c.args.size() == 3 ? arg(c, 2) : Tensor();
      // With the ReLU fused in, its mask is the output's sign: read from the
      // output where the caller has it (the jit), else recomputed (eager
      // mode's conv2d_relu fuses only without grad, so rarely).
      const Tensor y = !at.flag ? Tensor() : !outputs.empty() && outputs[0].defined() ? outputs[0]
                                                                                      : convolution(x, wt, bias, w, true);
      const Tensor gy = at.flag ? where(le(y, 0.0), 0.0, g) : g;  // as relu's own rule: NaN passes
      std::vector<Tensor> r{convolution_grad_input(gy, wt, w, x.size(2), x.size(3)), convolution_grad_weight(gy, x, w)};
      // The bias: over each image's plane (contiguous), then over the batch.
      if (c.args.size() == 3) r.push_back(sum(sum(gy, {2, 3}), {0}));
      return r;
    }
    case OpId::convolution_grad_input: {  // dx(gy, w): <dx, u> = <gy, conv(u, w)>
      const Window2d w = Window2d::from_ints(at.ints);
      return {convolution(g, arg(c, 1), Tensor(), w), convolution_grad_weight(arg(c, 0), g, w)};
    }
    case OpId::convolution_grad_weight: {  // dw(gy, x): <dw, v> = <gy, conv(x, v)>
      const Window2d w = Window2d::from_ints(at.ints);
      const Tensor& x = arg(c, 1);
      return {convolution(x, g, Tensor(), w), convolution_grad_input(arg(c, 0), g, w, x.size(2), x.size(3))};
    }
    // Composites recorded whole (cross_entropy where it ran fused, attention in compile_step).
    case OpId::cross_entropy:
    case OpId::scaled_dot_product_attention: return whole_composite_vjp(c, g);
    case OpId::custom: {
      const CustomOpDef& def = custom_op(at.custom);
      VOLT_CHECK(def.vjp, def.name, "has no gradient registered");
      return def.vjp(c.args, {g});
    }
    default:
      VOLT_FAIL(op_name(c.op), "has no derivative");
  }
}

// ---- wide gradients of bf16 products ----

namespace {

// a (m, k) @ b (k, n) -> (m, n) f32: the bf16 GEMM's sums, not rounded.
Tensor matmul_f32(const Tensor& a, const Tensor& b) {
  Attrs at;
  at.flag = true;
  return dispatch1(OpCall{OpId::matmul, {a, b}, at});
}

bool bf16_product_on_cpu(const OpCall& c) {
  if (c.op != OpId::matmul && c.op != OpId::linear) return false;
  if (c.op == OpId::matmul && c.attrs.flag) return false;
  for (const Value& v : c.args)
    if (!v.is_tensor || !v.tensor.defined() || v.tensor.dtype() != DType::bf16 || !v.tensor.device().is_cpu())
      return false;
  return true;
}

}  // namespace

bool has_wide_gradient(const OpCall& c, size_t i) {
  if (!bf16_product_on_cpu(c) || i >= c.args.size()) return false;
  if (c.op == OpId::linear) return i >= 1;  // weight (out, in), bias (out)
  return c.args[0].tensor.dim() == 2 && c.args[1].tensor.dim() == 2;  // batched ones: as they are
}

std::vector<Tensor> vjp_wide(const OpCall& c, const Tensor& g, const std::vector<bool>& wide) {
  auto is_wide = [&](size_t i) { return i < wide.size() && wide[i] && has_wide_gradient(c, i); };
  if (!is_wide(0) && !is_wide(1) && !is_wide(2)) return vjp(c, g, std::vector<Tensor>{});
  const Tensor& a = arg(c, 0);
  const Tensor& b = arg(c, 1);
  if (c.op == OpId::matmul) {  // a (m, k) @ b (k, n), g (m, n)
    return {is_wide(0) ? matmul_f32(g, b.t()) : matmul_grad_a(a, b, g),
            is_wide(1) ? matmul_f32(a.t(), g) : matmul_grad_b(a, b, g)};
  }
  // linear: x (*, in), w (out, in), g (*, out), as vjp's rule above.
  Tensor g2 = g.dim() == 2 ? g : g.reshape({-1, b.sizes()[0]});
  Tensor x2 = a.dim() == 2 ? a : a.reshape({-1, b.sizes()[1]});
  std::vector<Tensor> r{matmul(g, b), is_wide(1) ? matmul_f32(g2.t(), x2) : matmul(g2.t(), x2)};
  // The bias: the batch's sum in f32 (the bf16 rows are exact in f32), rounded nowhere.
  if (c.args.size() == 3) r.push_back(is_wide(2) ? sum(convert_element_type(g2, DType::f32), {0}) : sum(g2, {0}));
  return r;
}

namespace {

// a (.., m, k) @ b (.., k, n) = (.., m, n); 1-D operands get a unit dim first.
Tensor matmul_grad_a(const Tensor& a, const Tensor& b, const Tensor& g) {
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor g2 = g;
  if (a.dim() == 1) g2 = g2.unsqueeze(g.dim() - (b.dim() == 1 ? 0 : 1));
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  Tensor ga = matmul(g2, b2.transpose(-1, -2));
  if (a.dim() == 1) return reshape(sum_to(ga, Shape{1, a.sizes()[0]}), a.sizes());
  return sum_to(ga, a.sizes());
}

Tensor matmul_grad_b(const Tensor& a, const Tensor& b, const Tensor& g) {
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor g2 = g;
  if (a.dim() == 1) g2 = g2.unsqueeze(g.dim() - (b.dim() == 1 ? 0 : 1));
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  Tensor gb = matmul(a2.transpose(-1, -2), g2);
  if (b.dim() == 1) return reshape(sum_to(gb, Shape{b.sizes()[0], 1}), b.sizes());
  return sum_to(gb, b.sizes());
}

}  // namespace

}  // namespace volt::autograd
