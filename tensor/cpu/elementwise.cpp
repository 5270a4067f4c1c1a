// The CPU kernels of the elementwise prims: unary, binary and comparisons, each
// the op table's scalar expression (tensor/op_exprs.h) run by the loops of
// tensor/cpu/loops.h.
#include <type_traits>

#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>
#include <volt/tensor/op_exprs.h>
#include <volt/tensor/op_table.h>

namespace volt::cpu {
namespace {

// Each kernel computes the op table's expression (tensor/op_exprs.h): C is the
// compute dtype, the result converted to the output's.
#define VOLT_EXPR1(op, R) [](C x) { return static_cast<R>(op_exprs::expr_##op<R>(x)); }
#define VOLT_EXPR2(op, R) [](C a, C b) { return static_cast<R>(op_exprs::expr_##op<R>(a, b)); }

template <class C>
void run_unary(OpId op, const Operand& a, Tensor& out) {
  std::array<Operand, 1> in{a};
  switch (op) {
    case OpId::neg:
      if constexpr (!std::is_same_v<C, bool>) elementwise<C, C, 1>(out, in, VOLT_EXPR1(neg, C));
      return;
    case OpId::abs:
      if constexpr (!std::is_same_v<C, bool>) elementwise<C, C, 1>(out, in, VOLT_EXPR1(abs, C));
      return;
    case OpId::logical_not: elementwise<bool, C, 1>(out, in, VOLT_EXPR1(logical_not, bool)); return;
    default: break;
  }
  // Floating unary ops: integer inputs were converted to the float output type already.
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case OpId::exp: elementwise<C, C, 1>(out, in, VOLT_EXPR1(exp, C)); return;
      case OpId::log: elementwise<C, C, 1>(out, in, VOLT_EXPR1(log, C)); return;
      case OpId::sqrt: elementwise<C, C, 1>(out, in, VOLT_EXPR1(sqrt, C)); return;
      case OpId::rsqrt: elementwise<C, C, 1>(out, in, VOLT_EXPR1(rsqrt, C)); return;
      case OpId::tanh: elementwise<C, C, 1>(out, in, VOLT_EXPR1(tanh, C)); return;
      case OpId::sigmoid: elementwise<C, C, 1>(out, in, VOLT_EXPR1(sigmoid, C)); return;
      case OpId::reciprocal: elementwise<C, C, 1>(out, in, VOLT_EXPR1(reciprocal, C)); return;
      case OpId::erf: elementwise<C, C, 1>(out, in, VOLT_EXPR1(erf, C)); return;
      default: break;
    }
  }
  VOLT_FAIL(op_name(op), "has no CPU kernel for this dtype");
}

template <class C>
void run_binary(OpId op, const std::array<Operand, 2>& in, Tensor& out) {
  switch (op) {
    case OpId::add: elementwise<C, C, 2>(out, in, VOLT_EXPR2(add, C)); return;
    case OpId::sub: elementwise<C, C, 2>(out, in, VOLT_EXPR2(sub, C)); return;
    case OpId::mul: elementwise<C, C, 2>(out, in, VOLT_EXPR2(mul, C)); return;
    case OpId::div:
      if constexpr (std::is_floating_point_v<C>) elementwise<C, C, 2>(out, in, VOLT_EXPR2(div, C));
      return;
    case OpId::pow: elementwise<C, C, 2>(out, in, VOLT_EXPR2(pow, C)); return;
    case OpId::maximum: elementwise<C, C, 2>(out, in, VOLT_EXPR2(maximum, C)); return;
    case OpId::minimum: elementwise<C, C, 2>(out, in, VOLT_EXPR2(minimum, C)); return;
    case OpId::logical_and: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(logical_and, bool)); return;
    case OpId::logical_or: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(logical_or, bool)); return;
    case OpId::eq: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(eq, bool)); return;
    case OpId::ne: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(ne, bool)); return;
    case OpId::lt: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(lt, bool)); return;
    case OpId::le: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(le, bool)); return;
    case OpId::gt: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(gt, bool)); return;
    case OpId::ge: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(ge, bool)); return;
    default: VOLT_FAIL(op_name(op), "has no CPU kernel");
  }
}

#undef VOLT_EXPR1
#undef VOLT_EXPR2


}  // namespace

void unary_kernel(const OpCall& call, Tensor& out) {
  const DType c = compute_dtype(call);
  Prepared p = prepare(call, 0, c, out.sizes());
  VOLT_DISPATCH_DTYPE(c, [&] { run_unary<scalar_t>(call.op, p.ops[0], out); });
}

void binary_kernel(const OpCall& call, Tensor& out) {
  const DType c = compute_dtype(call);
  Prepared p = prepare(call, 0, c, out.sizes());
  VOLT_DISPATCH_DTYPE(c, [&] { run_binary<scalar_t>(call.op, {p.ops[0], p.ops[1]}, out); });
}

}  // namespace volt::cpu
