// Shapes and strides are plain vectors of int64; helpers for the arithmetic on them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

using Shape = std::vector<int64_t>;

// Both check every product: a shape whose element count (or a stride) does not
// fit in int64 is an error naming `op`.
int64_t shape_numel(const Shape& s, const char* op = "shape");
Shape contiguous_strides(const Shape& s, const char* op = "shape");
// a * b, or an error naming `op` and the shape `s` when the product overflows.
int64_t checked_mul(int64_t a, int64_t b, const Shape& s, const char* op);
std::string shape_str(const Shape& s);  // "[8, 784]"
// NumPy broadcasting of two shapes; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); errors name `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace volt
