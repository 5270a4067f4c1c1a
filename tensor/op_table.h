// The one table of ops.  Each row: name, kind, and for elementwise prims the
// scalar expression that defines the op (a, b, c are the operands in the
// compute dtype, T the result's C type): the CPU kernels call it as a C++
// function (tensor/op_exprs.h), the generated kernels (the jit's fusions, the
// CUDA eager kernels) receive it as text, and the CPU kernels' cases are
// generated from the rows (tensor/cpu/elementwise.cpp).  Adding an elementwise
// prim touches four places: its row here, its VJP rule (autograd/vjp.cpp), its
// public function (tensor/ops.h, ops.cpp) and its test rows; a math function
// its expression calls that no row called before is added to
// tensor/math_functions.inc, the one list of them.
#pragma once
#include <cstdint>

namespace volt {

enum class OpKind : uint8_t {
  Unary,      // elementwise, one operand, result dtype = operand dtype
  Binary,     // elementwise, two operands, result dtype = promoted dtype
  Compare,    // elementwise, two operands, result b8
  Ternary,    // where
  Convert,    // convert_element_type
  Random,     // uniform (Philox)
  Factory,    // full, arange
  View,       // reshape, permute, expand, narrow
  Copy,       // contiguous copy
  Pad,        // zero padding along one dim (the gradient of narrow)
  Reduce,     // sum, amax, amin, argmax, argmin over dims
  Matmul,     // matmul, linear
  Window,     // im2col, col2im, max_pool2d, convolution and their gradients (tensor/conv.h)
  Composite,  // written as a composition of other ops
  Custom,     // registered at run time (tensor/custom_op.h), told apart by Attrs::custom
};

//  X(name, kind, expression): the expression is C++ (tensor/op_exprs.h makes
//  it the CPU kernels' functions) and, stringified, the generators' text.
//
//  abs, tanh and sigmoid could be written from other prims; they stay prims
//  for what was measured (eager CPU, 4 M f32 elements, 2 threads, medians of
//  30): abs is one pass against where(x < 0, -x, x)'s three, 4.6x faster;
//  sigmoid 1.2-1.4x faster than reciprocal(exp(-x) + 1); tanh is 5x slower
//  than (1 - e) / (1 + e) with e = exp(-2x), but in f32 that formula loses 9
//  to 18 bits for 1e-6 < x < 0.1 (1 - e cancels), so tanh keeps libm's.  rsqrt and
//  reciprocal measured no faster as prims and are composites (composites.cpp).
#define VOLT_OPS(X)                               \
  X(neg, Unary, (-a))                             \
  X(abs, Unary, (a < 0 ? -a : a))                 \
  X(exp, Unary, volt_exp(a))                      \
  X(log, Unary, log(a))                           \
  X(sqrt, Unary, sqrt(a))                         \
  X(tanh, Unary, tanh(a))                         \
  X(sigmoid, Unary, (T(1) / (T(1) + exp(-a))))    \
  X(logical_not, Unary, (!a))                     \
  X(add, Binary, (a + b))                         \
  X(sub, Binary, (a - b))                         \
  X(mul, Binary, (a * b))                         \
  X(div, Binary, (a / b))                         \
  X(pow, Binary, pow(a, b))                       \
  X(maximum, Binary, (a != a || a > b ? a : b))   \
  X(minimum, Binary, (a != a || a < b ? a : b))   \
  X(logical_and, Binary, (a && b))                \
  X(logical_or, Binary, (a || b))                 \
  X(eq, Compare, (a == b))                        \
  X(ne, Compare, (a != b))                        \
  X(lt, Compare, (a < b))                         \
  X(le, Compare, (a <= b))                        \
  X(gt, Compare, (a > b))                         \
  X(ge, Compare, (a >= b))                        \
  X(where, Ternary, (a ? b : c))                  \
  X(convert_element_type, Convert, ((T)(a)))      \
  X(uniform, Random, )                            \
  X(full, Factory, )                              \
  X(arange, Factory, )                            \
  X(reshape, View, )                              \
  X(permute, View, )                              \
  X(expand, View, )                               \
  X(narrow, View, )                               \
  X(copy, Copy, a)                                \
  X(pad, Pad, )                                   \
  X(sum, Reduce, )                                \
  X(amax, Reduce, )                               \
  X(amin, Reduce, )                               \
  X(argmax, Reduce, )                             \
  X(argmin, Reduce, )                             \
  X(matmul, Matmul, )                             \
  X(linear, Matmul, )                             \
  X(im2col, Window, )                             \
  X(col2im, Window, )                             \
  X(max_pool2d, Window, )                         \
  X(max_pool2d_backward, Window, )                \
  X(convolution, Window, )                        \
  X(convolution_grad_input, Window, )             \
  X(convolution_grad_weight, Window, )            \
  X(relu, Composite, )                            \
  X(rsqrt, Composite, )                           \
  X(reciprocal, Composite, )                      \
  X(dropout, Composite, )                         \
  X(mean, Composite, )                            \
  X(var, Composite, )                             \
  X(softmax, Composite, )                         \
  X(log_softmax, Composite, )                     \
  X(nll_loss, Composite, )                        \
  X(cross_entropy, Composite, )                   \
  X(cross_entropy_backward, Composite, )          \
  X(conv2d, Composite, )                          \
  X(erf, Unary, volt_erf(a))                      \
  X(gelu, Composite, )                            \
  X(layer_norm, Composite, )                      \
  X(embedding, Composite, )                       \
  X(scaled_dot_product_attention, Composite, )    \
  X(scaled_dot_product_attention_backward, Composite, ) \
  X(custom, Custom, )

enum class OpId : uint8_t {
#define VOLT_OP_ENUM(name, kind, ...) name,
  VOLT_OPS(VOLT_OP_ENUM)
#undef VOLT_OP_ENUM
      kCount
};

struct OpInfo {
  const char* name;
  OpKind kind;
  const char* expr;
};

const OpInfo& op_info(OpId op);
inline const char* op_name(OpId op) { return op_info(op).name; }
// Custom ops may be either; tensor/custom_op.h has is_prim(const OpCall&).
inline bool is_prim(OpId op) { return op_info(op).kind != OpKind::Composite; }
inline bool is_elementwise(OpId op) {
  OpKind k = op_info(op).kind;
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Compare ||
         k == OpKind::Ternary || k == OpKind::Convert || k == OpKind::Random;
}

}  // namespace volt
