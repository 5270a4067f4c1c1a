// The window prims on CUDA (im2col, col2im, max_pool2d, max_pool2d_backward):
// hand-written kernel sources compiled by NVRTC, one thread per output
// element.  col2im and max_pool2d_backward gather rather than scatter (no
// atomics), summing in the CPU kernels' order, so results equal the CPU's.
// The convolution prims run in parts (convolution_by_parts, tensor/conv.h):
// these kernels and cuBLAS's matmul (tensor/cuda/matmul.cpp).
#pragma once
#include <string>

#include <volt/tensor/dispatch.h>

namespace volt::cuda {

// The kernel name and source of window prim `op` for f32 or f64.
std::string window_name(OpId op, DType t);
std::string window_source(OpId op, DType t);

// Runs a window prim whose output (contiguous, on the GPU) is allocated.
void run_window(const OpCall& call, const Tensor& out);

}  // namespace volt::cuda
