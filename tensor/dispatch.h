// The one dispatch point every op passes through.
//
// An OpCall names an op (tensor/op_table.h), its arguments (tensors or scalars)
// and its attributes.  dispatch() hands it to the current mode: normally eager
// execution on the arguments' device; the jit's tracer and the lazy device
// install themselves from above with a ModeGuard and record the call instead.
// After an eager prim runs, the grad hook (installed by autograd/) records it.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <vector>

#include <volt/tensor/op_table.h>
#include <volt/tensor/tensor.h>

namespace volt {

// An op argument: a tensor or a Python-style scalar.
struct Value {
  Tensor tensor;
  Scalar scalar;
  bool is_tensor = true;

  Value(Tensor t) : tensor(std::move(t)), is_tensor(true) {}
  Value(Scalar s) : scalar(s), is_tensor(false) {}
  Value(double s) : scalar(s), is_tensor(false) {}
  // Integers and bools keep their kind: mul(i32 tensor, 2) stays i32, as in PyTorch.
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Value(T s) : scalar(s), is_tensor(false) {}
};

struct Attrs {
  std::vector<int64_t> ints;  // reshape/expand/full/uniform: shape; permute: order;
                              // reductions: dims; narrow: {dim, start, length}
  double a = 0, b = 0;        // full: value; uniform: low, high; dropout: p
  DType dtype = DType::f32;   // convert_element_type, full, uniform
  Device device;              // full, uniform
  bool flag = false;          // reductions: keepdim; dropout: training
  uint64_t seed = 0, offset = 0;  // uniform: Philox key and first counter
  int64_t rng_slot = -1;          // uniform: 0 if `offset` is the caller's (tensor/ops.h), -1 if a tracer's
  int64_t custom = -1;            // custom: which registered op (tensor/custom_op.h)
};

struct OpCall {
  OpId op = OpId::kCount;  // none yet
  std::vector<Value> args;
  Attrs attrs;
};

// What a prim produces, before any data exists.
struct TensorMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

// Checks a call and infers its outputs; errors name the op (tensor/meta.cpp).
std::vector<TensorMeta> infer_meta(const OpCall& call);
// The dtype an elementwise op computes in (its operands are converted to it):
// the one rule the CPU and CUDA kernels and the jit's code generator follow.
DType compute_dtype(const OpCall& call);
// Composite ops: the decomposition into other ops (tensor/composites.cpp).
std::vector<Tensor> decompose(const OpCall& call);
// gelu, layer_norm and embedding's decompositions (tensor/transformer_ops.cpp).
std::vector<Tensor> transformer_decomposition(const OpCall& call);
// The composites eager mode may run as one fused kernel (Backend::fuses):
// cross_entropy (logits, target) and cross_entropy_backward (g, logits, target).
inline bool has_fused_kernel(OpId op) { return op == OpId::cross_entropy || op == OpId::cross_entropy_backward; }
// Where the logits stand among such a call's arguments; the target follows them.
inline size_t fused_logits_index(OpId op) { return op == OpId::cross_entropy_backward ? 1 : 0; }
// The outputs of such a call when it runs fused (see run_eager).
std::vector<TensorMeta> fused_meta(const OpCall& call);

class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  virtual std::vector<Tensor> run(OpCall& call) = 0;
  // The value of a one-element tensor the mode owns (a proxy, a lazy tensor).
  virtual double item(const Tensor& t) = 0;
  // An in-place write (copy_) into a tensor without data while the mode is
  // set.  The compiled training step's tracer rebinds `dst` to the value `src`
  // (same shape, dtype and device); false: the mode cannot take it.
  virtual bool assign(const Tensor& dst, const Tensor& src) {
    (void)dst;
    (void)src;
    return false;
  }
};

DispatchMode* current_mode();
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode* mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  DispatchMode* prev_;
};

// Who runs a tensor's value when no mode owns it (the lazy device registers one).
using ItemResolver = double (*)(const Tensor& t);
void set_item_resolver(DeviceType type, ItemResolver fn);
ItemResolver item_resolver(DeviceType type);

// Grad mode: whether eager prims are recorded for backward.
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }

 private:
  bool prev_;
};

// The lazy device's recorder (installed by jit/lazy/record.cpp): a prim that reads or
// makes a lazy tensor is handed to it, and it returns lazy outputs, instead of
// a backend running it.  The grad hook still runs after it.
using LazyHandler = std::vector<Tensor> (*)(const OpCall& call);
void set_lazy_handler(LazyHandler fn);

using GradHook = void (*)(const OpCall& call, std::vector<Tensor>& outputs);
void set_grad_hook(GradHook hook);

// Records `call` for backward as eager mode does after running it (the grad
// hook), when grad mode is on and an argument needs a gradient: for outputs
// made otherwise than by running the call (autocast's cached casts).
void record_for_grad(const OpCall& call, std::vector<Tensor>& outputs);

std::vector<Tensor> dispatch(OpCall call);
Tensor dispatch1(OpCall call);
// Eager execution, skipping the mode: what dispatch does when no mode is set.
std::vector<Tensor> run_eager(const OpCall& call);
// Runs one prim on its device's backend; no autograd.
std::vector<Tensor> run_prim(const OpCall& call);
// The strides that let `a` be read as `shape` (same element count) without a
// copy, or nullopt: PyTorch's rule for view(), under which dims merge or split
// only within runs of dims that are contiguous with each other.
std::optional<Shape> reshape_strides(const Tensor& a, const Shape& shape);

}  // namespace volt
