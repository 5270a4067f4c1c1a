// Meta functions: check a call and infer what it produces, without any data.
// Tracers use these to give proxies their shape, dtype and device.
#include <algorithm>

#include <volt/tensor/attention.h>
#include <volt/tensor/conv.h>
#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/dispatch.h>

namespace volt {

namespace {

// PyTorch's result_type: dimensioned tensors outrank zero-dim tensors, which
// outrank scalars; a lower group only matters if its kind (bool < int < float)
// is higher than everything above it.
DType result_type(const std::vector<Value>& args, size_t first = 0) {
  bool have[3] = {false, false, false};
  DType group[3] = {DType::b8, DType::b8, DType::b8};
  for (size_t i = first; i < args.size(); ++i) {
    const Value& v = args[i];
    int g;
    DType d;
    if (v.is_tensor) {
      g = v.tensor.dim() > 0 ? 0 : 1;
      d = v.tensor.dtype();
    } else {
      g = 2;
      d = v.scalar.default_dtype();
    }
    group[g] = have[g] ? promote_types(group[g], d) : d;
    have[g] = true;
  }
  DType r = DType::b8;
  bool any = false;
  for (int g = 0; g < 3; ++g) {
    if (!have[g]) continue;
    if (!any) {
      r = group[g];
      any = true;
    } else if (scalar_kind(group[g]) > scalar_kind(r)) {
      // A float scalar next to an integer tensor gives the default float (f32),
      // an int scalar next to a bool tensor gives i64.
      r = g == 2 ? group[g] : promote_types(r, group[g]);
      if (g == 2 && scalar_kind(group[g]) == ScalarKind::Float) r = DType::f32;
    }
  }
  return r;
}

Device common_device(const OpCall& call) {
  const Tensor* first = nullptr;
  for (const Value& v : call.args) {
    if (!v.is_tensor || !v.tensor.defined()) continue;
    if (!first) {
      first = &v.tensor;
      continue;
    }
    // Zero-dim CPU tensors may join a computation on another device, as in PyTorch.
    if (v.tensor.device() != first->device() && !(v.tensor.dim() == 0 && v.tensor.device().is_cpu()))
      VOLT_FAIL(op_name(call.op), "expected all tensors on one device, got "
                                      << first->device().str() << " and " << v.tensor.device().str());
  }
  return first ? first->device() : call.attrs.device;
}

Shape broadcast_all(const OpCall& call) {
  Shape s;
  for (const Value& v : call.args)
    if (v.is_tensor) s = broadcast_shapes(s, v.tensor.sizes(), op_name(call.op));
  return s;
}

void check_arity(const OpCall& call, size_t n) {
  VOLT_CHECK(call.args.size() == n, op_name(call.op),
             "expected " << n << " arguments, got " << call.args.size());
  bool any_tensor = n == 0;
  for (const Value& v : call.args) {
    if (v.is_tensor) {
      VOLT_CHECK(v.tensor.defined(), op_name(call.op), "got an undefined tensor");
      any_tensor = true;
    }
  }
  VOLT_CHECK(any_tensor, op_name(call.op), "expected at least one tensor argument");
}

std::vector<TensorMeta> reduce_meta(const OpCall& call) {
  const Tensor& a = call.args[0].tensor;
  const char* op = op_name(call.op);
  Shape out;
  for (int64_t i = 0; i < a.dim(); ++i) {
    bool reduced = std::find(call.attrs.ints.begin(), call.attrs.ints.end(), i) != call.attrs.ints.end();
    if (reduced) {
      if (call.op != OpId::sum)
        VOLT_CHECK(a.sizes()[i] > 0, op, "cannot reduce over an empty dim " << i << " of "
                                                                            << a.meta_str());
      if (call.attrs.flag) out.push_back(1);
    } else {
      out.push_back(a.sizes()[i]);
    }
  }
  if (a.dim() == 0 && call.op != OpId::sum)
    VOLT_CHECK(a.numel() == 1, op, "empty input");
  DType dt = a.dtype();
  if (call.op == OpId::sum && is_integral(dt, true)) dt = DType::i64;
  if (call.op == OpId::argmax || call.op == OpId::argmin) dt = DType::i64;
  return {{out, dt, a.device()}};
}

std::vector<TensorMeta> matmul_meta(const OpCall& call) {
  const Tensor& a = call.args[0].tensor;
  const Tensor& b = call.args[1].tensor;
  VOLT_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), "matmul",
             "expected two floating tensors of one dtype, got " << dtype_name(a.dtype()) << " and "
                                                                << dtype_name(b.dtype()));
  VOLT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul",
             "both arguments need at least one dim, got " << shape_str(a.sizes()) << " and "
                                                          << shape_str(b.sizes()));
  Shape as = a.sizes(), bs = b.sizes();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), k2 = bs[bs.size() - 2], n = bs.back();
  VOLT_CHECK(k == k2, "matmul",
             "shapes " << shape_str(a.sizes()) << " and " << shape_str(b.sizes())
                       << " cannot be multiplied (" << k << " != " << k2 << ")");
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape out = broadcast_shapes(ba, bb, "matmul");
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  // flag: the f32 sums of a bf16 product kept as they are (a weight's
  // gradient for its f32 master copy), not rounded to bf16.
  if (call.attrs.flag) {
    VOLT_CHECK(a.dtype() == DType::bf16 && a.device().is_cpu(), "matmul",
               "an f32 result (out_dtype=f32) is computed for bf16 operands on the CPU, got "
                   << dtype_name(a.dtype()) << " on " << a.device().str());
    return {{out, DType::f32, a.device()}};
  }
  return {{out, a.dtype(), a.device()}};
}

std::vector<TensorMeta> linear_meta(const OpCall& call) {
  const Tensor& x = call.args[0].tensor;
  const Tensor& w = call.args[1].tensor;
  VOLT_CHECK(w.dim() == 2, "linear", "weight must be 2-D (out, in), got " << shape_str(w.sizes()));
  VOLT_CHECK(x.dim() >= 1, "linear", "input needs at least one dim");
  VOLT_CHECK(x.dtype() == w.dtype() && is_floating(x.dtype()), "linear",
             "expected floating input and weight of one dtype, got " << dtype_name(x.dtype())
                                                                     << " and " << dtype_name(w.dtype()));
  VOLT_CHECK(x.sizes().back() == w.sizes()[1], "linear",
             "input " << shape_str(x.sizes()) << " and weight " << shape_str(w.sizes())
                      << " do not match (" << x.sizes().back() << " != " << w.sizes()[1] << ")");
  if (call.args.size() == 3) {
    const Tensor& b = call.args[2].tensor;
    VOLT_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0] && b.dtype() == w.dtype(), "linear",
               "bias must be " << dtype_name(w.dtype()) << "[" << w.sizes()[0] << "], got "
                               << dtype_name(b.dtype()) << shape_str(b.sizes()));
  }
  Shape out = x.sizes();
  out.back() = w.sizes()[0];
  return {{out, x.dtype(), x.device()}};
}

}  // namespace

DType compute_dtype(const OpCall& call) {
  switch (op_info(call.op).kind) {
    case OpKind::Ternary: return result_type(call.args, 1);
    case OpKind::Unary: {  // exp, log, ... of integers compute (and give) floats
      const DType a = call.args[0].tensor.dtype();
      const bool keeps = call.op == OpId::logical_not || call.op == OpId::neg || call.op == OpId::abs;
      return keeps || is_floating(a) ? a : DType::f32;
    }
    case OpKind::Copy:
    case OpKind::Convert: return call.args[0].tensor.dtype();
    default: break;
  }
  if (call.op == OpId::logical_and || call.op == OpId::logical_or) return DType::b8;
  DType dt = result_type(call.args);
  if (call.op == OpId::div && !is_floating(dt)) dt = DType::f32;
  return dt;
}

std::vector<TensorMeta> fused_meta(const OpCall& call) {
  const char* op = op_name(call.op);
  VOLT_CHECK(has_fused_kernel(call.op), op, "has no fused kernel");
  const size_t first = fused_logits_index(call.op);
  check_arity(call, first + 2);
  for (const Value& v : call.args) VOLT_CHECK(v.is_tensor, op, "expected tensor arguments, got a scalar");
  const Tensor& logits = call.args[first].tensor;
  const Tensor& target = call.args[first + 1].tensor;
  VOLT_CHECK(logits.dim() == 2 && logits.sizes()[1] > 0, op,
             "expected logits (N, C) with C >= 1, got " << shape_str(logits.sizes()));
  VOLT_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::f64, op,
             "expected f32 or f64 logits, got " << dtype_name(logits.dtype()));
  VOLT_CHECK(target.dim() == 1 && target.sizes()[0] == logits.sizes()[0] && is_integral(target.dtype()), op,
             "expected an integer target (" << logits.sizes()[0] << "), got " << target.meta_str());
  const Device dev = common_device(call);
  const bool per_row = cross_entropy_options(call.attrs).reduction == Reduction::None;
  const Shape loss_shape = per_row ? Shape{logits.sizes()[0]} : Shape{};
  if (first == 0) return {{loss_shape, logits.dtype(), dev}};
  const Tensor& g = call.args[0].tensor;
  VOLT_CHECK(g.sizes() == loss_shape && is_floating(g.dtype()), op,
             "expected a gradient shaped like the loss, " << shape_str(loss_shape) << ", got " << g.meta_str());
  return {{logits.sizes(), logits.dtype(), dev}};
}

// Composites have no metadata of their own, except attention, which is
// recorded as one op where it runs as one (tensor/attention.h).
static std::vector<TensorMeta> composite_meta(const OpCall& call) {
  if (call.op == OpId::scaled_dot_product_attention || call.op == OpId::scaled_dot_product_attention_backward)
    return attention_meta(call);
  VOLT_FAIL(op_name(call.op), "is a composite op and has no meta function of its own");
}

std::vector<TensorMeta> infer_meta(const OpCall& call) {
  const OpInfo& info = op_info(call.op);
  const char* op = info.name;
  switch (info.kind) {
    case OpKind::Unary: {
      check_arity(call, 1);
      const Tensor& a = call.args[0].tensor;
      DType dt = a.dtype();
      if (call.op == OpId::logical_not) dt = DType::b8;
      else if (call.op == OpId::neg || call.op == OpId::abs)
        VOLT_CHECK(dt != DType::b8, op, "is not defined for b8 tensors");
      else if (!is_floating(dt)) dt = DType::f32;  // exp, log, ... of integers give floats
      return {{a.sizes(), dt, a.device()}};
    }
    case OpKind::Binary:
    case OpKind::Compare: {
      check_arity(call, 2);
      DType dt = result_type(call.args);
      if (info.kind == OpKind::Compare || call.op == OpId::logical_and || call.op == OpId::logical_or)
        dt = DType::b8;
      else if (call.op == OpId::div && !is_floating(dt))
        dt = DType::f32;  // true division
      else if (dt == DType::b8 && call.op != OpId::maximum && call.op != OpId::minimum)
        VOLT_CHECK(call.op == OpId::mul || call.op == OpId::add, op,
                   "is not defined for b8 operands");
      return {{broadcast_all(call), dt, common_device(call)}};
    }
    case OpKind::Ternary: {
      check_arity(call, 3);
      const Value& c = call.args[0];
      bool cond_bool = c.is_tensor ? c.tensor.dtype() == DType::b8 : c.scalar.kind == ScalarKind::Bool;
      VOLT_CHECK(cond_bool, op, "condition must be b8, got "
                                    << (c.is_tensor ? dtype_name(c.tensor.dtype()) : "a number"));
      return {{broadcast_all(call), result_type(call.args, 1), common_device(call)}};
    }
    case OpKind::Convert:
      check_arity(call, 1);
      return {{call.args[0].tensor.sizes(), call.attrs.dtype, call.args[0].tensor.device()}};
    case OpKind::Random:
      VOLT_CHECK(is_floating(call.attrs.dtype), op,
                 "expected a floating dtype, got " << dtype_name(call.attrs.dtype));
      [[fallthrough]];
    case OpKind::Factory:
      for (int64_t d : call.attrs.ints)
        VOLT_CHECK(d >= 0, op, "negative dimension in " << shape_str(call.attrs.ints));
      shape_numel(call.attrs.ints, op);
      return {{call.attrs.ints, call.attrs.dtype, call.attrs.device}};
    case OpKind::View: {
      check_arity(call, 1);
      const Tensor& a = call.args[0].tensor;
      Shape out;
      switch (call.op) {
        case OpId::reshape:
          VOLT_CHECK(shape_numel(call.attrs.ints, op) == a.numel(), op,
                     "shape " << shape_str(call.attrs.ints) << " is invalid for input of size "
                              << a.numel());
          out = call.attrs.ints;
          break;
        case OpId::permute:
          for (int64_t d : call.attrs.ints) out.push_back(a.sizes().at(d));
          break;
        case OpId::expand: {
          out = call.attrs.ints;
          for (int64_t d : out)
            VOLT_CHECK(d >= 0, op, "invalid size " << shape_str(out) << " for " << shape_str(a.sizes())
                                                   << " (-1 keeps an existing dim; new leading dims need a size)");
          VOLT_CHECK(out.size() >= a.sizes().size(), op,
                     "cannot expand " << shape_str(a.sizes()) << " to fewer dims " << shape_str(out));
          shape_numel(out, op);
          size_t lead = out.size() - a.sizes().size();
          for (size_t i = 0; i < a.sizes().size(); ++i)
            VOLT_CHECK(a.sizes()[i] == out[lead + i] || a.sizes()[i] == 1, op,
                       "the expanded size " << out[lead + i] << " must match the existing size "
                                            << a.sizes()[i] << " at dim " << lead + i << " ("
                                            << shape_str(a.sizes()) << " -> " << shape_str(out) << ")");
          break;
        }
        case OpId::narrow:
          out = a.sizes();
          out[call.attrs.ints[0]] = call.attrs.ints[2];
          break;
        default: break;
      }
      return {{out, a.dtype(), a.device()}};
    }
    case OpKind::Copy:
      check_arity(call, 1);
      return {{call.args[0].tensor.sizes(), call.args[0].tensor.dtype(), call.args[0].tensor.device()}};
    case OpKind::Pad: {
      check_arity(call, 1);
      const Tensor& a = call.args[0].tensor;
      Shape out = a.sizes();
      out[call.attrs.ints[0]] += call.attrs.ints[1] + call.attrs.ints[2];
      return {{out, a.dtype(), a.device()}};
    }
    case OpKind::Reduce:
      check_arity(call, 1);
      return reduce_meta(call);
    case OpKind::Matmul:
      if (call.op == OpId::matmul) {
        check_arity(call, 2);
        common_device(call);
        return matmul_meta(call);
      }
      VOLT_CHECK(call.args.size() == 2 || call.args.size() == 3, op,
                 "expected input, weight and optional bias");
      common_device(call);
      return linear_meta(call);
    case OpKind::Window:
      return window_meta(call);
    case OpKind::Custom: {
      const CustomOpDef& def = custom_op(call.attrs.custom);
      VOLT_CHECK(def.meta, def.name, "is a composite op and has no meta function of its own");
      return def.meta(call.args);
    }
    case OpKind::Composite:
      return composite_meta(call);
  }
  VOLT_FAIL(op, "unknown op kind");
}

}  // namespace volt
