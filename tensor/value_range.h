// Whether a double fits a dtype, for the ops that put a user's number into a
// tensor (full, arange, masked_fill, clamp).
#pragma once
#include <volt/tensor/dtype.h>

namespace volt {

// Whether v converts to t without overflow: any v for a floating or bool
// dtype; for an integer dtype a finite v in [min, max + 1) (past that, the
// C++ conversion is undefined behaviour).
bool holds_value(DType t, double v);

}  // namespace volt
