#include <volt/jit/flash_attention.h>

#include <volt/jit/grad_transform.h>
#include <volt/tensor/attention.h>
#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/attention.h>
#endif

namespace volt::jit {

namespace {

// flash_attention's and flash_attention_backward's scalar arguments follow
// their tensors: causal, scale, dropout_p, rng_offset (as executor_arguments
// gives them for scaled_dot_product_attention).
constexpr size_t kForwardTensors = 3, kBackwardTensors = 6;

FlashParams params_at(const std::vector<Value>& v, size_t first, const PhiloxState& rng) {
  FlashParams p;
  p.causal = v.at(first).scalar.value != 0;
  p.scale = v.at(first + 1).scalar.value;
  p.dropout_p = v.at(first + 2).scalar.value;
  p.seed = rng.seed;
  p.offset = rng.offset + static_cast<uint64_t>(v.at(first + 3).scalar.value);
  return p;
}

// Called outside a program (eagerly): the forward's draws come from the global
// generator.  The backward must see its forward's counters, which only a
// program keeps: eagerly, with dropout, it is an error rather than another mask.
PhiloxState eager_rng(const std::vector<Value>& v, size_t first) {
  if (v.at(first + 2).scalar.value <= 0) return {};
  VOLT_CHECK(first == kForwardTensors, "flash_attention_backward",
             "with dropout runs only in a program, where it draws its forward's mask");
  const Shape& q = v.at(first == kForwardTensors ? 0 : 1).tensor.sizes();
  const Shape& k = v.at(first == kForwardTensors ? 1 : 2).tensor.sizes();
  PhiloxState s = rng_reserve(static_cast<uint64_t>(q[0] * q[1] * q[2] * k[2]));
  s.offset -= static_cast<uint64_t>(v.at(first + 3).scalar.value);
  return s;
}

std::vector<Tensor> run_forward(const std::vector<Value>& v, const PhiloxState& rng) {
  return flash_attention_forward(v[0].tensor, v[1].tensor, v[2].tensor, params_at(v, kForwardTensors, rng));
}

std::vector<Tensor> run_backward(const std::vector<Value>& v, const PhiloxState& rng) {
  return flash_attention_backward(v[0].tensor, v[1].tensor, v[2].tensor, v[3].tensor, v[4].tensor, v[5].tensor,
                                  params_at(v, kBackwardTensors, rng));
}

// Where the kernels run: f32, f64, bf16 and f16 (the 16-bit types computed in
// f32 inside the tiles) on the CPU, and on CUDA devices where built.
// v[0] is q, or the output's gradient (of the same dtype and device) for the backward.
bool supported(const std::vector<Value>& v) {
  const Tensor& q = v[0].tensor;
  bool device_ok = q.device().is_cpu();
#ifdef VOLT_WITH_CUDA
  // A CUDA thread holds its rows in registers: head dims up to kMaxAttentionHeadDim.
  bool narrow = true;
  for (const Value& a : v)
    if (a.is_tensor && a.tensor.defined()) narrow &= a.tensor.sizes().back() <= cuda::kMaxAttentionHeadDim;
  device_ok |= q.device().is_cuda() && narrow;
#endif
  return device_ok && (q.dtype() == DType::f32 || q.dtype() == DType::f64 || is_half(q.dtype()));
}

std::string bool_repr(size_t index, const Scalar& s, size_t causal_index) {
  if (index != causal_index) return "";
  return s.value != 0 ? "True" : "False";
}

// The executor: an OperatorExecutor whose operators read the program's Philox
// state when they run, which OperatorExecutor::execute does not hand on.
class FlashExecutor final : public OperatorExecutor {
 public:
  FlashExecutor();
  std::vector<Tensor> execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                              const PhiloxState& rng) const override;

 private:
  Symbol forward_, backward_;
};

FlashExecutor::FlashExecutor() : OperatorExecutor("flash", "1") {
  forward_ = register_operator(
      "flash_attention",
      {.meta =
           [](const std::vector<Value>& v) {
             const Tensor &q = v[0].tensor, &val = v[2].tensor;
             const Shape& s = q.sizes();
             return std::vector<TensorMeta>{{{s[0], s[1], s[2], val.sizes()[3]}, q.dtype(), q.device()},
                                            {{s[0], s[1], s[2]}, flash_lse_dtype(q.dtype()), q.device()}};
           },
       .fn = [](const std::vector<Value>& v) { return run_forward(v, eager_rng(v, kForwardTensors)); },
       .arg_names = {"", "", "", "causal", "scale", "dropout_p", "rng_offset"},
       .scalar_repr = [](size_t i, const Scalar& s) { return bool_repr(i, s, 3); }});
  backward_ = register_operator(
      "flash_attention_backward",
      {.meta =
           [](const std::vector<Value>& v) {
             std::vector<TensorMeta> m;
             for (size_t i = 1; i <= 3; ++i) m.push_back({v[i].tensor.sizes(), v[i].tensor.dtype(), v[i].tensor.device()});
             return m;
           },
       .fn = [](const std::vector<Value>& v) { return run_backward(v, eager_rng(v, kBackwardTensors)); },
       .arg_names = {"", "", "", "", "out", "lse", "causal", "scale", "dropout_p", "rng_offset"},
       .scalar_repr = [](size_t i, const Scalar& s) { return bool_repr(i, s, 6); }});

  // scaled_dot_product_attention(q, k, v, causal, scale, dropout_p, rng_offset) -> out
  auto forward_only = [this](const std::vector<Value>& v) {
    return std::vector<Tensor>{forward_(v[0], v[1], v[2], v[3], v[4], v[5], v[6])[0]};
  };
  // The forward keeps each row's log-sum-exp; the backward recomputes the weights from it.
  auto grad = [this](const std::vector<Value>& v) {
    Tensor q = v[0].tensor, k = v[1].tensor, val = v[2].tensor;
    std::vector<Tensor> fwd = forward_(q, k, val, v[3], v[4], v[5], v[6]);
    Tensor g = get_grad(fwd[0]);
    std::vector<Tensor> grads = backward_(g, q, k, val, fwd[0], fwd[1], v[3], v[4], v[5], v[6]);
    put_grads({q, k, val}, grads);
    return std::vector<Tensor>{fwd[0]};
  };
  register_implementation(OpId::scaled_dot_product_attention,
                          {.checker = supported, .execution_transform = forward_only, .grad_transform = grad});
  // The gradients as one op (compile_step's tape, no dropout): the forward runs
  // again for its log-sum-exp, since the step keeps nothing of it for backward.
  auto backward_whole = [this](const std::vector<Value>& v) {
    std::vector<Tensor> fwd = forward_(v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    return backward_(v[0], v[1], v[2], v[3], fwd[0], fwd[1], v[4], v[5], v[6], v[7]);
  };
  register_implementation(OpId::scaled_dot_product_attention_backward,
                          {.checker = supported, .execution_transform = backward_whole});
}

std::vector<Tensor> FlashExecutor::execute(const BoundSymbol& b, const std::vector<Tensor>& args,
                                           const PhiloxState& rng) const {
  if (!owns(b.call)) return OperatorExecutor::execute(b, args, rng);
  std::vector<Value> v = b.call.args;
  size_t k = 0;
  for (Value& a : v)
    if (a.is_tensor && a.tensor.defined()) a.tensor = args.at(k++);
  return b.call.attrs.custom == forward_.id() ? run_forward(v, rng) : run_backward(v, rng);
}

}  // namespace

OperatorExecutor& flash_executor() {
  // Never destroyed: the executor registry and the custom op table outlive every static.
  static auto* ex = new FlashExecutor;
  return *ex;
}

}  // namespace volt::jit
