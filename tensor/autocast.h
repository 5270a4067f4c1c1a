// Automatic mixed precision (autocast): which ops run in a 16-bit float type
// and which in f32, written once and applied in two places.
//
//   { volt::AutocastGuard amp(volt::kBF16);   // eager: ops dispatched on this thread
//     Tensor loss = cross_entropy(net(x), y); } // linear in bf16, the loss in f32
//   auto f = volt::jit::autocast(volt::jit::jit(net), volt::kBF16);  // the jit's pass
//
// The rule, by op (as PyTorch's autocast lists put it):
//   - low precision: matmul, linear, convolution, conv2d and attention.  Their
//     f32 tensor arguments are converted to the low type (f64 ones are left
//     alone) and the op runs there; its result stays in the low type.
//     Attention keeps the rule on inside it: its two matmuls run in the low
//     type, its softmax in f32 (as a fused attention kernel computes).
//   - f32: softmax, log_softmax, layer_norm, nll_loss, cross_entropy, gelu and
//     the reductions sum, mean, var.  Their bf16/f16 arguments are converted to
//     f32.  (gelu: PyTorch's kernel computes it in f32 on a bf16 input; volt's
//     decomposes into prims, which in bf16 would round after every one.)
//   - everything else runs on what it is given (an add of a bf16 and an f32
//     tensor promotes to f32 as usual).
// The casts are ordinary convert_element_type ops, so autograd and the jit's
// grad pass differentiate them: the gradient of a cast is a cast back, and an
// f32 parameter gets an f32 gradient.  Inside an op the rule chose for, the
// ops its decomposition calls are not cast again; backward() runs with
// autocast off (the gradients follow the forward's types).
#pragma once
#include <optional>

#include <volt/tensor/dispatch.h>

namespace volt {

// Which list an op is on.
enum class AutocastRule { None, LowPrecision, Float32 };
AutocastRule autocast_rule(OpId op);

// Throws unless `low` is bf16 or f16; `who` names the caller in the message.
void check_autocast_dtype(DType low, const char* who);

// The 16-bit type this thread autocasts to now, or none.
std::optional<DType> autocast_dtype();

// Converts a call's tensor arguments as the rule of its op says for `low`.
// Returns whether the op is on one of the lists.
bool autocast_arguments(OpCall& call, DType low);
// Whether the ops an op on the lists decomposes into are cast too
// (attention), or run as they are given (every other op).
inline bool autocast_reaches_inside(OpId op) { return op == OpId::scaled_dot_product_attention; }

// ---- the cast cache (tensor/autocast_cache.cpp) ----
// Eager autocast converts an f32 parameter once per value, not once per use:
// as PyTorch's autocast caches the casts of leaf tensors that require grad,
// the low copy of such a tensor (on the CPU, with no mode set) is kept and
// handed out again, each time with a fresh cast node for autograd, while the
// parameter's storage, layout and version (tensor/storage.h) are unchanged.
// Any write to the parameter (copy_, an in-place op, mark_modified) bumps its
// version and the next cast makes the copy again.  Unlike PyTorch's, the copy
// outlives the autocast region: an optimizer that writes the parameter
// writes its copy in the same pass (autocast_copy_rewritten), so the next
// step's forward reads it without a cast.  The cache holds a copy per
// parameter cast (half the parameter's bytes in bf16) until the parameter is
// gone or clear_autocast_cache().
bool autocast_caches(const Tensor& t);                  // whether t's casts are cached
Tensor autocast_cached_cast(const Tensor& t, DType low);  // t's copy in `low`, recorded as a cast
// The same copy, made current if it is not, as a new handle on its data and
// without a cast recorded: what the jit's cached_cast (jit/cached_cast.h) and
// a compiled step's low-precision weights (jit/step/low_weights.h) read.
Tensor autocast_cached_value(const Tensor& t, DType low);
// For an optimizer: the copy of `param` the cache holds, if it is up to date
// with param's value (else undefined).  Whoever writes param and, from the
// same new values, this copy calls autocast_copy_rewritten(param) after both
// writes: the copy is then current again (and its own version moves on).
Tensor autocast_cached_copy(const Tensor& param);
void autocast_copy_rewritten(const Tensor& param);
void clear_autocast_cache();
size_t autocast_cache_size();  // the entries of live parameters

// Turns eager autocast on for this thread (AutocastGuard(kBF16)), or off
// (AutocastGuard(std::nullopt)), until it goes out of scope; nests.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> low);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

}  // namespace volt
