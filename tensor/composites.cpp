// Composite ops, each written once as a composition of other ops.  Eager mode
// runs these (so autograd sees only prims); tracers record the composite as a
// bound symbol and these prims as its decomposition.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include <volt/tensor/conv.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>

namespace volt {

namespace {

Scalar zero_like(DType t) { return is_floating(t) ? Scalar(0.0) : Scalar(int64_t{0}); }

int64_t reduced_count(const Tensor& a, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= a.sizes()[d];
  return n;
}

// The fused kernels check the same in fused_meta; the decomposition must not
// leave it to log_softmax or amax to fail with their own names.
void check_logits(const Tensor& logits, const Tensor& target, const char* op) {
  VOLT_CHECK(logits.dim() == 2 && logits.sizes()[1] > 0, op,
             "expected logits (N, C) with C >= 1, got " << shape_str(logits.sizes()));
  VOLT_CHECK(target.dim() == 1 && target.sizes()[0] == logits.sizes()[0], op,
             "expected target (" << logits.sizes()[0] << "), got " << shape_str(target.sizes()));
  VOLT_CHECK(is_integral(target.dtype()), op, "expected an integer target, got " << dtype_name(target.dtype()));
  VOLT_CHECK(is_floating(logits.dtype()), op, "expected f32 or f64 logits, got " << dtype_name(logits.dtype()));
}

// Targets compared with class numbers and ignore_index in i64: a u8 target
// compared in u8 would meet a wrapped arange past 255 classes and take
// ignore_index -100 for 156.
Tensor targets_as_i64(const Tensor& t) { return t.dtype() == DType::i64 ? t : convert_element_type(t, DType::i64); }

// nll_loss's target check, as an op: (target, classes) -> target, after
// checking that every target lies in [0, classes).  Eager mode runs it at
// once; a trace or a lazy graph runs it when the targets' values exist, with
// the same message.  `op` is the op the message names: the check inside
// cross_entropy's decomposition names cross_entropy, as its eager kernel does
// (two registrations of one printed name, so a trace reads the same).
int64_t register_target_range_check(const char* op);

int64_t target_range_check(const char* op) {
  static const int64_t nll_id = register_target_range_check("nll_loss");
  static const int64_t ce_id = register_target_range_check("cross_entropy");
  return std::string_view(op) == "cross_entropy" ? ce_id : nll_id;
}

int64_t register_target_range_check(const char* op) {
  CustomOpDef def;
  def.name = "check_target_range";
  def.meta = meta_like_first_argument(def.name);
  def.kernel = [op](const std::vector<Value>& args) {
    const Tensor& target = args.at(0).tensor;
    const int64_t c = static_cast<int64_t>(args.at(1).scalar.value);
    // Targets equal to ignore_index (the third argument) may be anything.
    const bool has_ignore = args.size() > 2;
    const int64_t ignore = has_ignore ? static_cast<int64_t>(args[2].scalar.value) : 0;
    if (target.numel() > 0) {
      int64_t lo = 0, hi = 0;
      bool any = false;
      auto note = [&](int64_t v) {
        if (has_ignore && v == ignore) return;
        lo = any ? std::min(lo, v) : v;
        hi = any ? std::max(hi, v) : v;
        any = true;
      };
      if (target.device().is_cpu() && target.is_contiguous()) {
        // Read in place: a compiled training step allocates nothing per step.
        VOLT_DISPATCH_DTYPE(target.dtype(), [&] {
          const scalar_t* p = static_cast<const scalar_t*>(target.raw_data());
          for (int64_t i = 0; i < target.numel(); ++i) note(static_cast<int64_t>(p[i]));
        });
      } else {
        for (int64_t v : target.to(kCPU).to_vector<int64_t>()) note(v);
      }
      VOLT_CHECK(!any || (lo >= 0 && hi < c), op,
                 "target values must lie in [0, " << c << "), got [" << lo << ", " << hi << "]"
                                                  << (has_ignore ? "; targets equal to ignore_index (" + std::to_string(ignore) + ") are skipped"
                                                                 : std::string()));
    }
    return std::vector<Tensor>{target};
  };
  return register_custom_op(std::move(def));
}

// The row losses from log-probabilities (N, C): (1 - e) * -logp[i, t_i] +
// e/C * sum_j -logp[i, j], then 0 where t_i is ignore_index, then the reduction
// (Mean divides by the rows not ignored).  Only prims (and the range check), so
// it fuses and differentiates.
// `op` names the op whose targets are checked (nll_loss, or cross_entropy's).
Tensor loss_from_logp(const Tensor& logp, const Tensor& given, const CrossEntropyOptions& o, const char* op) {
  const int64_t c = logp.sizes()[1];
  const Tensor target = targets_as_i64(given);
  // The range check needs the targets' values: an op of its own, so that a
  // trace or a lazy graph runs it when the values exist.
  Tensor checked = dispatch1(custom_call(target_range_check(op), {target, Scalar(c), Scalar(o.ignore_index)}));
  Tensor classes = Tensor::arange(static_cast<double>(c), DType::i64, logp.device());
  Tensor onehot = eq(checked.unsqueeze(1), classes);
  Tensor rows = neg(sum(where(onehot, logp, 0.0), {1}));
  const double e = o.label_smoothing;
  if (e > 0) rows = add(mul(rows, 1.0 - e), mul(neg(sum(logp, {1})), e / static_cast<double>(c)));
  Tensor valid = ne(target, Scalar(o.ignore_index));
  rows = where(valid, rows, 0.0);
  switch (o.reduction) {
    case Reduction::None: return rows;
    case Reduction::Sum: return sum(rows);
    case Reduction::Mean: break;
  }
  return div(sum(rows), sum(convert_element_type(valid, rows.dtype())));
}

}  // namespace

std::vector<Tensor> decompose(const OpCall& call) {
  if (call.op == OpId::custom) {
    const CustomOpDef& def = custom_op(call.attrs.custom);
    VOLT_CHECK(def.decomposition, def.name, "is a prim and has no decomposition");
    return def.decomposition(call.args);
  }
  const Tensor& a = call.args.at(0).tensor;
  const Attrs& at = call.attrs;
  switch (call.op) {
    // As prims these measured no faster than their parts (eager CPU, 4 M f32:
    // reciprocal 1.5 ms either way, rsqrt 9.7 ms against 6.7 ms for sqrt then a
    // division), and a fused kernel computes the same expression either way.
    case OpId::rsqrt: return {div(Value(1.0), sqrt(a))};
    case OpId::reciprocal: return {div(Value(1.0), a)};
    case OpId::relu: {
      // relu(x) = where(x <= 0, 0, x): a NaN is not <= 0, so it stays NaN
      // (PyTorch's rule; where(x > 0, x, 0) would turn it into 0).
      Scalar z = zero_like(a.dtype());
      return {where(le(a, Value(z)), Value(z), a)};
    }
    case OpId::dropout: {
      // Keep with probability 1-p, scale the kept values by 1/(1-p).
      double keep = 1.0 - at.a;
      // bf16/f16 draw in f32, as eager mode does (it decomposes them on f32
      // copies, tensor/dispatch.cpp): the same mask, and a traced dropout of
      // a bf16 value (autocast's ReLU output) fuses like any other.
      Tensor u = uniform(a.sizes(), 0.0, 1.0, is_half(a.dtype()) ? DType::f32 : a.dtype(), a.device());
      Tensor mask = lt(u, keep);
      Tensor m = convert_element_type(mask, a.dtype());
      // p == 1 drops everything: scale by 0 rather than 1/0.
      return {mul(mul(a, m), keep > 0 ? 1.0 / keep : 0.0)};
    }
    case OpId::mean: {
      VOLT_CHECK(is_floating(a.dtype()), "mean", "expected a floating tensor, got "
                                                     << dtype_name(a.dtype()));
      return {div(sum(a, at.ints, at.flag), static_cast<double>(reduced_count(a, at.ints)))};
    }
    case OpId::var: {
      VOLT_CHECK(is_floating(a.dtype()), "var", "expected a floating tensor, got "
                                                    << dtype_name(a.dtype()));
      Tensor m = mean(a, at.ints, true);
      Tensor d = sub(a, m);
      double n = static_cast<double>(reduced_count(a, at.ints)) - at.a;
      return {div(sum(mul(d, d), at.ints, at.flag), n > 0 ? n : NAN)};
    }
    case OpId::softmax: {
      int64_t dim = at.ints[0];
      Tensor e = exp(sub(a, amax(a, {dim}, true)));
      return {div(e, sum(e, {dim}, true))};
    }
    case OpId::log_softmax: {
      // Shift by the max so exp never overflows.
      int64_t dim = at.ints[0];
      Tensor s = sub(a, amax(a, {dim}, true));
      return {sub(s, log(sum(exp(s), {dim}, true)))};
    }
    case OpId::nll_loss: {
      const Tensor& target = call.args.at(1).tensor;
      VOLT_CHECK(a.dim() == 2, "nll_loss", "expected log-probabilities (N, C), got "
                                               << shape_str(a.sizes()));
      VOLT_CHECK(target.dim() == 1 && target.sizes()[0] == a.sizes()[0], "nll_loss",
                 "expected target (" << a.sizes()[0] << "), got " << shape_str(target.sizes()));
      VOLT_CHECK(is_integral(target.dtype()), "nll_loss",
                 "expected an integer target, got " << dtype_name(target.dtype()));
      // flag: the nll_loss of cross_entropy's decomposition, whose bad targets name cross_entropy.
      return {loss_from_logp(a, target, cross_entropy_options(at), at.flag ? "cross_entropy" : "nll_loss")};
    }
    case OpId::cross_entropy: {
      const Tensor& target = call.args.at(1).tensor;
      check_logits(a, target, "cross_entropy");
      const CrossEntropyOptions o = cross_entropy_options(at);
      if (o.label_smoothing == 0) {
        Attrs nll;
        set_cross_entropy_attrs(nll, o);
        nll.flag = true;  // checked as cross_entropy's targets
        return {dispatch1(OpCall{OpId::nll_loss, {log_softmax(a, 1), target}, nll})};
      }
      return {loss_from_logp(log_softmax(a, 1), target, o, "cross_entropy")};
    }
    case OpId::cross_entropy_backward: {
      // args: g (the loss's gradient: () or (N) for Reduction::None), logits (N, C), target (N)
      const Tensor& logits = call.args.at(1).tensor;
      check_logits(logits, call.args.at(2).tensor, "cross_entropy_backward");
      const Tensor target = targets_as_i64(call.args.at(2).tensor);
      const CrossEntropyOptions o = cross_entropy_options(at);
      const int64_t c = logits.sizes()[1];
      const double e = o.label_smoothing;
      Tensor classes = Tensor::arange(static_cast<double>(c), DType::i64, logits.device());
      Tensor onehot = convert_element_type(eq(target.unsqueeze(1), classes), logits.dtype());
      Tensor d = sub(softmax(logits, 1), e > 0 ? mul(onehot, 1.0 - e) : onehot);
      if (e > 0) d = sub(d, e / static_cast<double>(c));
      // Each row's factor: g (or g_i for None), over the rows counted for Mean;
      // ignored rows get no gradient.
      Tensor valid = ne(target, Scalar(o.ignore_index));
      Tensor scale = o.reduction == Reduction::None ? a.unsqueeze(1) : a;
      if (o.reduction == Reduction::Mean) scale = div(scale, sum(convert_element_type(valid, logits.dtype())));
      return {where(valid.unsqueeze(1), mul(d, scale), 0.0)};
    }
    case OpId::conv2d:
      return {conv2d_decomposition(call)};
    case OpId::gelu:
    case OpId::layer_norm:
    case OpId::embedding:
    case OpId::scaled_dot_product_attention:
    case OpId::scaled_dot_product_attention_backward:
      return transformer_decomposition(call);
    default:
      VOLT_FAIL(op_name(call.op), "has no decomposition");
  }
}

}  // namespace volt
