// The op table's elementwise expressions (tensor/op_table.h) as C++
// functions: expr_<op><T>(a, b, c), with T the result's type and a, b, c in
// the compute dtype (compute_dtype).  The CPU kernels call them, and the code
// generators receive the same tokens as text, so a CPU eager kernel and a
// generated one compute one expression.
//
//   op_exprs::expr_sigmoid<float>(x)     // (T(1) / (T(1) + exp(-a)))
//   op_exprs::expr_maximum<double>(a, b) // (a != a || a > b ? a : b)
#pragma once
#include <cmath>

#include <volt/tensor/op_table.h>

namespace volt::op_exprs {

#include <volt/tensor/math_functions.inc>

#define VOLT_OP_EXPR_FN(name, kind, ...)                                                         \
  template <class T, class A>                                                                    \
  inline auto expr_##name([[maybe_unused]] A a, [[maybe_unused]] A b = A(), [[maybe_unused]] A c = A()) { \
    return __VA_ARGS__;                                                                          \
  }
VOLT_OPS(VOLT_OP_EXPR_FN)
#undef VOLT_OP_EXPR_FN

}  // namespace volt::op_exprs
