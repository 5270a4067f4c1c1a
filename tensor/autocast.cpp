#include <volt/tensor/autocast.h>

#include <volt/tensor/error.h>

namespace volt {

namespace {
thread_local std::optional<DType> g_autocast;
}  // namespace

AutocastRule autocast_rule(OpId op) {
  switch (op) {
    case OpId::matmul:
    case OpId::linear:
    case OpId::convolution:
    case OpId::conv2d:
    case OpId::scaled_dot_product_attention:
      return AutocastRule::LowPrecision;
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::layer_norm:
    case OpId::nll_loss:
    case OpId::cross_entropy:
    case OpId::sum:
    case OpId::mean:
    case OpId::var:
    // erf/tanh per element: in f32 the region that computes it rounds once on
    // the way out (into the next GEMM's bf16) instead of after every prim.
    case OpId::gelu:
      return AutocastRule::Float32;
    default:
      return AutocastRule::None;
  }
}

void check_autocast_dtype(DType low, const char* who) {
  VOLT_CHECK(is_half(low), who,
             "autocast needs a 16-bit float type to cast to (bf16 or f16), got " << dtype_name(low));
}

std::optional<DType> autocast_dtype() { return g_autocast; }

static Tensor cast(const Tensor& t, DType dtype) {
  Attrs at;
  at.dtype = dtype;
  return dispatch1(OpCall{OpId::convert_element_type, {t}, at});
}

bool autocast_arguments(OpCall& call, DType low) {
  const AutocastRule rule = autocast_rule(call.op);
  if (rule == AutocastRule::None) return false;
  for (Value& v : call.args) {
    if (!v.is_tensor || !v.tensor.defined()) continue;
    const DType d = v.tensor.dtype();
    if (rule == AutocastRule::LowPrecision && d == DType::f32)
      v.tensor = autocast_caches(v.tensor) ? autocast_cached_cast(v.tensor, low) : cast(v.tensor, low);
    if (rule == AutocastRule::Float32 && is_half(d)) v.tensor = cast(v.tensor, DType::f32);
  }
  return true;
}

AutocastGuard::AutocastGuard(std::optional<DType> low) : prev_(g_autocast) {
  if (low) check_autocast_dtype(*low, "AutocastGuard");
  g_autocast = low;
}
AutocastGuard::~AutocastGuard() { g_autocast = prev_; }

}  // namespace volt
