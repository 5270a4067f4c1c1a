// Ops defined outside volt's op table, at run time (the jit's operator
// executors register them).  Each is one row of the `custom` op, told apart by
// Attrs::custom.  A custom op is either
//   - a composite: `decomposition` writes it with existing ops, which gives it
//     its metadata, its printed decomposition and its gradient; or
//   - a prim: `meta` gives its metadata; it is differentiable only if `vjp` is set.
// `kernel`, when set, computes it on real tensors (a composite without a
// kernel runs its decomposition).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt {

struct CustomOpDef {
  using Fn = std::function<std::vector<Tensor>(const std::vector<Value>&)>;
  using MetaFn = std::function<std::vector<TensorMeta>(const std::vector<Value>&)>;
  // Gradients of the inputs (undefined where none) from the gradients of the outputs.
  using VjpFn = std::function<std::vector<Tensor>(const std::vector<Value>& inputs,
                                                  const std::vector<Tensor>& output_grads)>;
  std::string name;
  Fn decomposition;
  MetaFn meta;
  Fn kernel;
  VjpFn vjp;
  // A collective (an all-reduce across processes): every process must run it
  // in the same order; the jit runs it right after its last input is made
  // (jit/step/collectives.h) and never moves it into a fused region.
  bool collective = false;
  // How traces print a call: arguments from the first named one on print as
  // name=value; a scalar argument prints as scalar_repr says ("" or unset: as
  // a number), e.g. 'mean' for a reduction passed as its int.
  std::vector<std::string> arg_names;
  std::function<std::string(size_t index, const Scalar& value)> scalar_repr;
};

// The metadata of an op with one output shaped, typed and placed as its first
// argument (a check that passes its input through, a copy):
//   def.meta = meta_like_first_argument("check_finite");
// A first argument that is not a defined tensor is an error naming `op`.
CustomOpDef::MetaFn meta_like_first_argument(std::string op);

// Registers an op and returns its id (the value of Attrs::custom).
int64_t register_custom_op(CustomOpDef def);
const CustomOpDef& custom_op(int64_t id);

// The OpCall of a custom op applied to `args`.
OpCall custom_call(int64_t id, std::vector<Value> args);

// Name and kind of any call, custom ops included.
const char* op_name(const OpCall& call);
bool is_prim(const OpCall& call);

}  // namespace volt
