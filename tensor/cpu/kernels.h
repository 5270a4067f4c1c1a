// The CPU backend's kernels, one file per op family (tensor/cpu/backend.cpp
// dispatches an OpCall to them by the op table's kind).  Each writes an output
// already allocated with the op's meta shape and dtype; inputs have any strides.
#pragma once
#include <utility>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/tensor.h>

namespace volt {

namespace cpu {
void elementwise_kernel(const OpCall& call, Tensor& out);  // elementwise.cpp: neg, exp, add, eq, ...
void where_kernel(const OpCall& call, Tensor& out);    // copy.cpp: where(cond, a, b)
void convert_kernel(const Tensor& src, Tensor& out);   // copy.cpp: any strides and dtype -> out's
void copy_kernel(const Tensor& dst, const Tensor& src);  // copy.cpp: into dst's strides (views)
void factory_kernel(const OpCall& call, Tensor& out);  // copy.cpp: full, arange
void pad_kernel(const OpCall& call, Tensor& out);      // copy.cpp: constant (zero) padding
void uniform_kernel(const OpCall& call, Tensor& out);  // random.cpp: Philox uniform
void reduce_kernel(const OpCall& call, Tensor& out);   // reductions.cpp: sum, amax, amin
void cross_entropy_kernel(const OpCall& call, Tensor& out);  // cross_entropy.cpp: fused rows

// matmul's operands broadcast to out's batch dims: a (batch..., m, k) and
// b (batch..., k, n), a vector a taken as (1, k), b as (k, 1); offsets(i)
// gives product i's first elements in a and b (matmul.cpp).
struct BatchedMatmul {
  BatchedMatmul(const Tensor& a0, const Tensor& b0, const Tensor& out);
  int64_t count() const { return shape_numel(batch); }
  std::pair<int64_t, int64_t> offsets(int64_t i) const;
  Tensor a, b;
  int64_t m = 0, k = 0, n = 0;
  Shape batch;
};
}  // namespace cpu

void cpu_matmul(const Tensor& a, const Tensor& b, Tensor& out);                      // matmul.cpp
void cpu_linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);  // matmul.cpp
void cpu_window(const OpCall& call, Tensor& out);                                    // windows.cpp

}  // namespace volt
