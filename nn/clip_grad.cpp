#include <volt/nn/clip_grad.h>

#include <cmath>

#include <volt/tensor/custom_op.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt::nn::utils {

namespace {

struct Grad {
  Tensor param, grad;
};

// The gradients clipping works on: those defined and not empty.
std::vector<Grad> grads_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Grad> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    VOLT_CHECK(params[i].defined(), op, "parameter " << i << " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined() || g.numel() == 0) continue;
    VOLT_CHECK(is_floating(g.dtype()), op,
               "parameter " << i << " has a gradient of dtype " << dtype_name(g.dtype()) << ", expected a floating type");
    grads.push_back({params[i], g});
  }
  return grads;
}

// The parameter's gradient becomes `value`.  Eagerly
// it is written into the gradient's memory, as PyTorch's in-place clipping
// does; an expanded gradient (of a sum, its elements shared) is replaced
// instead.  Traced (a compiled step), the parameter's .grad is the new traced
// value: the old one is the output of a recorded op and stays as it was.
void write_grad(Grad& g, const Tensor& value) {
  const bool traced = current_mode() != nullptr && g.grad.is_proxy() && !g.grad.device().is_lazy();
  // A lazy gradient may share a base it was viewed from (backward can hand a
  // leaf a reshaped result), which the lazy device cannot write into: on
  // that device every gradient is replaced.
  if (traced || g.grad.device().is_lazy() || (g.grad.has_data() && !g.grad.is_contiguous())) {
    g.param.set_grad(value);
    g.grad = value;
    return;
  }
  g.grad.copy_(value);
}

// The norm of one gradient: (sum |g|^p)^(1/p), or max |g|.  g * g rather than
// pow for p = 2, as PyTorch's vector_norm does.
Tensor norm_of(const Tensor& g, double p) {
  if (std::isinf(p)) return amax(abs(g));
  if (p == 1) return sum(abs(g));
  if (p == 2) return sqrt(sum(g * g));
  return pow(sum(pow(abs(g), p)), 1.0 / p);
}


// The total norm after checking that it is finite, as an op: (total, norm_type)
// -> total.  Eagerly it runs at once; a trace, a compiled step or a lazy graph
// runs it when the norm's value exists, before the gradients it scales.
int64_t finite_norm_check() {
  static const int64_t id = [] {
    CustomOpDef def;
    def.name = "check_finite_norm";
    def.arg_names = {"total", "norm_type"};
    def.meta = meta_like_first_argument(def.name);
    def.kernel = [](const std::vector<Value>& args) {
      const Tensor& total = args.at(0).tensor;
      const double norm_type = args.at(1).scalar.value;
      const double v = total.to(kCPU).to(DType::f64).item<double>();
      VOLT_CHECK(std::isfinite(v), "clip_grad_norm_",
                 "the total norm of order " << norm_type << " of the gradients is "
                                            << (std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf") << ", which cannot be clipped (error_if_nonfinite=true; with false, "
                                               "the gradients are scaled by min(1, max_norm / (norm + 1e-6)))");
      return std::vector<Tensor>{total};
    };
    return register_custom_op(std::move(def));
  }();
  return id;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  constexpr const char* kOp = "clip_grad_norm_";
  VOLT_CHECK(norm_type > 0 && !std::isnan(norm_type), kOp,
             "norm_type must be positive or kInfNorm, got " << norm_type);
  VOLT_CHECK(max_norm >= 0 && !std::isnan(max_norm), kOp, "max_norm must be >= 0, got " << max_norm);
  NoGradGuard no_grad;
  std::vector<Grad> grads = grads_of(params, kOp);
  if (grads.empty()) return Tensor::scalar_tensor(0.0, DType::f32);
  const Device device = grads[0].grad.device();
  // The norm of the per-gradient norms, accumulated in their promoted dtype.
  const bool inf = std::isinf(norm_type);
  Tensor total;
  for (const Grad& g : grads) {
    Tensor n = norm_of(g.grad, norm_type);
    if (n.device() != device) n = n.to(device);
    const Tensor term = inf || norm_type == 1 ? n : norm_type == 2 ? n * n : pow(n, norm_type);
    total = !total.defined() ? term : inf ? maximum(total, term) : total + term;
  }
  if (norm_type == 2) total = sqrt(total);
  else if (!inf && norm_type != 1) total = pow(total, 1.0 / norm_type);
  if (error_if_nonfinite) total = dispatch1(custom_call(finite_norm_check(), {total, Scalar(norm_type)}));
  // min(1, max_norm / (total + 1e-6)), as a tensor: nothing is read back.
  const Tensor coef = minimum(max_norm / (total + 1e-6), 1.0);
  for (Grad& g : grads) {
    Tensor c = coef;
    if (c.dtype() != g.grad.dtype()) c = c.to(g.grad.dtype());
    if (c.device() != g.grad.device()) c = c.to(g.grad.device());
    write_grad(g, g.grad * c);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  constexpr const char* kOp = "clip_grad_value_";
  VOLT_CHECK(clip_value >= 0 && !std::isnan(clip_value), kOp, "clip_value must be >= 0, got " << clip_value);
  NoGradGuard no_grad;
  for (Grad& g : grads_of(params, kOp)) write_grad(g, minimum(maximum(g.grad, -clip_value), clip_value));
}

}  // namespace volt::nn::utils
