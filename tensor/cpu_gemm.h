// The CPU GEMM's register-tiled kernels, one set per instruction set, chosen
// at run time from the CPU's features (tensor/cpu_gemm_kernels.cpp); the
// packing, blocking and threading around them is tensor/cpu_matmul.cpp.
//
// Every kernel computes each element of C as one chain of fused multiply-adds
// over k in ascending order, then adds the bias, then applies the ReLU, so all
// sets give the same bits, at any thread count.
//
// VOLT_CPU_ISA=avx512|avx2|generic picks a set (an error if this CPU lacks it);
// by default the widest this CPU has.
#pragma once

#include <cstdint>

namespace volt::cpu {

enum class Isa { generic, avx2, avx512 };

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU (and its operating system)
Isa isa();                    // the set in use
void set_isa(Isa isa);        // throws volt::Error if this CPU lacks it

template <class T>
struct GemmKernels {
  // The packed tile: C[0:rows, 0:cols] (= or +=) Ap Bp over kc, for one panel of
  // A (mr rows, k-major, zero-padded) and one of B (nr columns, k-major,
  // zero-padded); then + bias[0:cols] (when given) and max(., 0) (when relu).
  int mr, nr;
  void (*packed_tile)(const T* ap, const T* bp, int64_t kc, T* c, int64_t ldc, int rows, int cols,
                      bool accumulate, const T* bias, bool relu);
  // C (m, n) row-major = A (m, k) B (k, n) (+ bias) (relu) without packing, for
  // few rows or a short k; false when the layout does not suit (then pack).
  bool (*skinny)(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
                 int64_t brs, int64_t bcs, T* c, const T* bias, bool relu);
  // One panel of R rows of X (rows contiguous, row stride rs; `live` of them
  // real, the rest zeros), k-major: dst[kk R + r] = x[r rs + kk] for kk < kc.
  // A transposition: vector shuffles where the set has them.
  void (*pack_rows)(const T* x, int64_t live, int64_t kc, int64_t rs, int R, T* dst);
  // The same panel from X with unit row stride and column stride cs: runs of
  // `live` elements copied, dst[kk R + r] = x[kk cs + r].
  void (*pack_cols)(const T* x, int64_t live, int64_t kc, int64_t cs, int R, T* dst);
};

const GemmKernels<float>& gemm_kernels_f32();   // of isa()
const GemmKernels<double>& gemm_kernels_f64();

}  // namespace volt::cpu

namespace volt {
class Tensor;
// out = max(x W^T + bias, 0) on the CPU in one pass: the bias and the ReLU are
// applied as each tile of the product is stored.  x (*, in), w (out, in), bias
// (out) or null, out contiguous (*, out), all f32 or all f64.  Bit for bit what
// relu(linear(x, w, bias)) gives.
void cpu_linear_relu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
}  // namespace volt
