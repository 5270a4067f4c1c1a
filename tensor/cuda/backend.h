// Pieces of the CUDA backend that other CUDA code (matmul, the fused
// optimizers, the jit's nvrtc executor) shares.
#pragma once
#include <functional>
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

// matmul and linear through cuBLAS (tensor/cuda/matmul.cpp).
void cublas_matmul(const Tensor& a, const Tensor& b, const Tensor& out);
void cublas_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);

}  // namespace volt::cuda
