// The pieces the code generator's two renderings share: the elementwise one
// (jit/codegen.cpp) and the row one (jit/codegen_rows.cpp).  Internal to the jit.
#pragma once
#include <functional>
#include <ostream>
#include <string>

#include <volt/jit/trace.h>

namespace volt::jit::detail {

using NameFn = std::function<std::string(const Tensor&)>;

// A scalar as a C literal of type t (infinities and NaN as expressions).
std::string literal(const Scalar& s, DType t);
// The index into a (broadcast) input of shape `in` of element `var` of shape `out`.
std::string index_expr(const Shape& in, const Shape& out, const std::string& var = "i");
// The C expression one elementwise prim computes (uniform's draws shifted by rng_shift).
std::string prim_expr(const OpCall& c, DType result, const NameFn& name, unsigned long long rng_shift);
// Booleans are bytes in memory and ints in registers (see render in codegen.cpp).
std::string memory_type(DType t);
std::string local_type(DType t);
// bf16 and f16 in a kernel (tensor/half.inc's conversions): a value of type t
// loaded from its bits into float, rounded to t as eager mode stores it (and
// held in float), and stored as its bits.  Other types pass through as they are.
std::string load_value(DType t, const std::string& e);
std::string round_value(DType t, const std::string& e);
std::string store_value(DType t, const std::string& e);
// `const T* in_x = (const T*)args[k];` for each input, then each output's pointer.
// sums_first: the first input is `const float*`, the f32 sums its bf16/f16
// value is rounded from on load (generate_kernel's sums_first).
void emit_pointers(std::ostream& os, const BoundSymbol& f, const NameFn& name, bool sums_first = false);
// The value of input `in` loaded by expression `e`: converted from its bits,
// or, for the first input of a sums_first kernel, rounded from its f32 sum.
std::string load_input(const BoundSymbol& f, const Tensor& in, const std::string& e, bool sums_first);

// A row region's kernel function (codegen_rows.cpp), and the definitions a
// row kernel needs on each device, appended to the preludes.
std::string render_rows(const BoundSymbol& f, const std::string& kernel_name, const NameFn& name,
                        unsigned long long rng_shift, bool sums_first = false);
const char* host_row_prelude();
const char* cuda_row_prelude();

}  // namespace volt::jit::detail
