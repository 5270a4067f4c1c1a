// The CPU kernels of the elementwise prims: unary, binary and comparisons, each
// the op table's scalar expression (tensor/op_exprs.h) run by the loops of
// tensor/cpu/loops.h, one case per row of the table.
#include <type_traits>

#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>
#include <volt/tensor/op_exprs.h>
#include <volt/tensor/op_table.h>

// abs's row compares with 0, also for b8, which infer_meta refuses for abs;
// its case is instantiated for every C all the same.
#pragma GCC diagnostic ignored "-Wbool-compare"

namespace volt::cpu {
namespace {

// Every elementwise prim of the op table (tensor/op_table.h) gets its case
// here from its row: the kernel computes the row's expression
// (tensor/op_exprs.h) in the compute dtype C, the result in bool for a
// comparison or a logical op (an expression whose type is bool), else in C.
// compute_dtype (tensor/meta.cpp) makes C floating wherever the op needs it
// (exp of an integer, integer division), so every case is instantiated for
// every C and a new prim needs no line here.
template <class C, class F>
auto result_of(F f) {
  if constexpr (std::is_same_v<decltype(f(C(), C())), bool>) return bool();
  else return C();
}

#define VOLT_ELEMENTWISE_CASE_Unary(name)                                                              \
  case OpId::name: {                                                                                   \
    using R = decltype(result_of<C>([](C a, C) { return op_exprs::expr_##name<C>(a); }));             \
    return elementwise<R, C, 1>(out, {in[0]}, [](C a) { return static_cast<R>(op_exprs::expr_##name<R>(a)); }); \
  }
#define VOLT_ELEMENTWISE_CASE_Binary(name)                                                             \
  case OpId::name: {                                                                                   \
    using R = decltype(result_of<C>([](C a, C b) { return op_exprs::expr_##name<C>(a, b); }));        \
    return elementwise<R, C, 2>(out, {in[0], in[1]},                                                   \
                                [](C a, C b) { return static_cast<R>(op_exprs::expr_##name<R>(a, b)); }); \
  }
#define VOLT_ELEMENTWISE_CASE_Compare(name) VOLT_ELEMENTWISE_CASE_Binary(name)
#define VOLT_ELEMENTWISE_NONE(name)
#define VOLT_ELEMENTWISE_CASE_Ternary VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Convert VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Random VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Factory VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_View VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Copy VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Pad VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Reduce VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Matmul VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Window VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Composite VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE_Custom VOLT_ELEMENTWISE_NONE
#define VOLT_ELEMENTWISE_CASE(name, kind, ...) VOLT_ELEMENTWISE_CASE_##kind(name)

// in: one operand per argument of the op, in C.  out: (the broadcast shape).
template <class C>
void run_elementwise(OpId op, const std::vector<Operand>& in, Tensor& out) {
  switch (op) {
    VOLT_OPS(VOLT_ELEMENTWISE_CASE)
    default: VOLT_FAIL(op_name(op), "has no CPU kernel");
  }
}

#undef VOLT_ELEMENTWISE_CASE

}  // namespace

void elementwise_kernel(const OpCall& call, Tensor& out) {
  const DType c = compute_dtype(call);
  Prepared p = prepare(call, 0, c, out.sizes());
  VOLT_DISPATCH_DTYPE(c, [&] { run_elementwise<scalar_t>(call.op, p.ops, out); });
}

}  // namespace volt::cpu
