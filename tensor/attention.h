// Scaled dot-product attention, as PyTorch's F.scaled_dot_product_attention.
//
//   Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true});
//   // q: (B, H, L, E), k: (B, H, S, E), v: (B, H, S, Ev) -> (B, H, L, Ev)
//
// It is a composite op: matmul(q, k^T) * scale, the causal mask (masked_fill
// with -inf where key j > query i), softmax over the keys, dropout, matmul
// with v.  Eager mode runs those prims; a trace prints the op with them
// underneath, and the jit's `flash` executor runs it instead as the tiled
// kernels below, which never hold the (L, S) matrix of scores.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <volt/tensor/random.h>
#include <volt/tensor/tensor.h>

namespace volt {

struct OpCall;
struct TensorMeta;

struct AttentionOptions {
  bool causal = false;          // query i sees keys j <= i (top-left aligned, as PyTorch's is_causal)
  std::optional<double> scale;  // default 1 / sqrt(E)
  double dropout_p = 0;         // applied to the attention weights only when > 0
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// The gradients {dq, dk, dv} as one op: the VJP rule where the op was
// recorded whole (compile_step, the lazy device), which the flash executor
// runs tiled.  Its decomposition recomputes the weights as prims.  With
// dropout, `mask` is where the forward drew its mask (the forward call's
// attrs.seed and attrs.offset: absolute on the lazy device, relative to the
// program's draws under a tracer); the backward draws it again, nothing new.
std::vector<Tensor> scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                                          const Tensor& v, const AttentionOptions& options,
                                                          const PhiloxState& mask = {});

// The decompositions into prims (what eager mode runs).  The calls'
// attributes: flag = causal, a = scale (resolved), b = dropout_p, seed and
// offset = where the dropout mask is drawn (eagerly, without a tracer, the
// forward draws from the global generator instead).
Tensor attention_decomposition(const OpCall& call);
std::vector<Tensor> attention_backward_decomposition(const OpCall& call);

// ---- the tiled (flash) kernels, on the CPU and on CUDA devices

// Element (b, h, i, j) of the attention weights is dropped where the Philox
// uniform of counter offset + ((b H + h) L + i) S + j, key seed, is not below
// 1 - dropout_p: the very draw the decomposition's dropout makes.
struct FlashParams {
  bool causal = false;
  double scale = 1;
  double dropout_p = 0;
  uint64_t seed = 0, offset = 0;
};

// -> {out (B, H, L, Ev), lse (B, H, L)}: lse is each query row's log-sum-exp
// of its scaled, masked scores, which backward needs to recompute the weights.
// f32 and f64 run on every device; bf16 and f16 on the CPU, where the kernels
// read them into f32, compute in f32 and round out (and dq, dk, dv) once into
// the operands' type.  lse is f32 for them (flash_lse_dtype).
std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p);
DType flash_lse_dtype(DType q);
// -> {dq, dk, dv}, from the output's gradient and what forward returned.
std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p);
// Attention is recorded as one op where it can run as one (the lazy device,
// compile_step's tape): the flash executor then takes it whole, or the claim
// pass opens it into its prims.  With dropout the call carries where its mask
// is drawn (attrs.seed, attrs.offset), which its backward draws again.
bool attention_runs_whole(const OpCall& call);
// Whether the call is attention's forward with dropout: it draws
// attention_mask_counters(call) Philox counters, one per weight (B H L S).
bool attention_draws(const OpCall& call);
uint64_t attention_mask_counters(const OpCall& call);
// The outputs of such a call: {out} for the op, {dq, dk, dv} for its backward.
std::vector<TensorMeta> attention_meta(const OpCall& call);

// The checks the op and the kernels share; errors name `op`.
void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const char* op);

}  // namespace volt
