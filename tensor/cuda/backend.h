// Pieces of the CUDA backend that other CUDA code (matmul, the fused
// optimizers, the jit's nvrtc executor) shares.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "tensor/cuda/nvrtc.h"
#include "tensor/tensor.h"

namespace volt::cuda {

// The kernel `name` whose source (without the prelude) `make_source` returns,
// memoised by name: kernel names encode everything their source depends on.
cudaKernel_t cached_kernel(const std::string& name, int device, const std::function<std::string()>& make_source);

// dst (any strides, CUDA) = src (any strides, same device, broadcastable), converting dtype.
void strided_copy(const Tensor& dst, const Tensor& src);
// A contiguous copy on the same device (the tensor itself when already contiguous).
Tensor contiguous_on_device(const Tensor& t);
// Sets every element of a contiguous CUDA tensor.
void fill(const Tensor& t, double value);

// How a (rows, cols) matrix view (the last two dims of sizes/strides) is
// handed to cuBLAS, which is column-major: as the matrix X^T (trans false:
// a row-major view, X^T is column-major with leading dimension ld) or as X
// itself with op T (trans true: a column-major view).  None for other strides
// (a broadcast or doubly strided view), which are packed first.
struct GemmOperand {
  bool trans;
  int64_t ld;
};
std::optional<GemmOperand> gemm_operand(const Shape& sizes, const Shape& strides);

// matmul and linear through cuBLAS (tensor/cuda/matmul.cpp).
void cublas_matmul(const Tensor& a, const Tensor& b, const Tensor& out);
void cublas_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);

}  // namespace volt::cuda
