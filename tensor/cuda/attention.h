// The CUDA attention kernels (tensor/cuda/attention.cpp): the algorithm of
// tensor/cpu/attention.cpp as NVRTC-compiled CUDA C, one GPU thread per row.
//
//   attention_source(DType::f32, 32, 32, AttentionKernel::Forward);  // volt_flash_forward_f32_e32_v32
#pragma once
#include <string>
#include <vector>

#include <volt/tensor/attention.h>
#include <volt/tensor/dtype.h>

namespace volt::cuda {

enum class AttentionKernel {
  Forward,       // one thread per query row: out, lse
  BackwardQuery, // one thread per query row: D = rowsum(dO o O), dq
  BackwardKey,   // one thread per key row: dk, dv
};

// The longest head_dim the kernels take (each thread holds its rows in registers).
constexpr int kMaxAttentionHeadDim = 256;

// Kernels are built per dtype and head dims (E for q and k, Ev for v).
std::string attention_name(DType t, int E, int Ev, AttentionKernel which);
std::string attention_source(DType t, int E, int Ev, AttentionKernel which);

// Contiguous CUDA tensors, f32, f64, bf16 or f16 (the 16-bit types computed in
// float, lse in float; tensor/attention.h says what they compute).
std::vector<Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlashParams& p);
std::vector<Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse,
                                             const FlashParams& p);

}  // namespace volt::cuda
