// Pieces of the CUDA backend that other CUDA code (matmul, the fused
// optimizers, the jit's nvrtc executor) shares.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <volt/tensor/cuda/kernels.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/tensor.h>

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

// The arguments of one eager elementwise kernel (tensor/cuda/kernels.h),
// packed as cudaLaunchKernel takes them.  Pure host work: tests run it on CPU
// tensors and hand params() to the same kernel source built for the host.
constexpr int kMaxDims = 8;
struct IndexArg {  // the prelude's volt_index
  int ndim = 0;
  long long size[kMaxDims] = {};
  long long stride[4][kMaxDims] = {};  // [0]: the output, [k + 1]: operand k (0 where broadcast)
};
struct ElementwiseLaunch {
  ElementwiseSpec spec;
  IndexArg ix;
  long long n = 0;
  void* out = nullptr;
  std::vector<void*> ptrs;      // tensor operands (null for scalars)
  std::vector<double> scalars;  // scalar operands, zero-dim CPU tensors included
  // Pointers to the fields above, in the kernel's parameter order (valid while *this lives).
  std::vector<void*> params();
};
// out (any strides) = call's op over its args: tensors on out's device
// (any strides, broadcast), zero-dim CPU tensors and scalars.
ElementwiseLaunch prepare_elementwise(const OpCall& call, const Tensor& out);

// A reduction as rows: `rows_view` is the input with its kept dims first and
// reduced dims last (a view; made contiguous before the kernel reads it), each
// output element reducing one row of `len`.
struct ReduceLaunch {
  Tensor rows_view;
  long long rows = 0, len = 1;
  unsigned block = 32;  // threads per row: a power of two, 32 to 256
  // Where the kept dims and the reduced dims each merge into one (a bias
  // gradient's sum over the rows of a matrix, say), the kernel reads the input
  // in place: element j of row r at r * row_stride + j * elem_stride.
  // Otherwise rows_view is first copied to a contiguous (rows, len) block.
  bool in_place = false;
  long long row_stride = 0, elem_stride = 1;
};
ReduceLaunch prepare_reduce(const OpCall& call, const Tensor& out);

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

// The arguments of the one column-major GEMM call that computes the row-major
// out (m, n) = a (m, k) @ b (k, n): C^T = B^T A^T, so b is cuBLAS's first
// operand.  None when an operand's strides need packing first.
struct GemmCall {
  bool trans_first, trans_second;  // op of b, op of a
  int64_t rows, cols, inner;       // cuBLAS's m, n, k: n, m, k of the row-major product
  int64_t ld_first, ld_second, ld_out;
};
std::optional<GemmCall> gemm_call(const Shape& a_sizes, const Shape& a_strides, const Shape& b_sizes,
                                  const Shape& b_strides);

// The values a bf16/f16 draw of U[lo, hi) is clamped to (volt::half_draw_bounds).
void half_bounds(DType t, double lo, double hi, float& bottom, float& top);

// matmul and linear through cuBLAS (tensor/cuda/matmul.cpp).
void cublas_matmul(const Tensor& a, const Tensor& b, const Tensor& out);
void cublas_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
// What cuBLASLt's epilogue applies after linear's bias: nothing, ReLU, or
// GELU's tanh approximation (gelu(x, "tanh")).
enum class LtActivation { none, relu, gelu_tanh };
// act(x (m, k) W^T + bias) into out in one cuBLASLt call (f32, bf16 or f16,
// all of one dtype, 2-D, the bias in the epilogue; an undefined bias: none,
// with an activation); with `pre` (GELU only) also x W^T + bias, rounded to
// out's dtype, into pre.  False where cuBLASLt
// is absent or the case is not one it takes.
bool cublaslt_linear_bias(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                          LtActivation act = LtActivation::none, const Tensor* pre = nullptr);
// dw (n, k) = g^T x and db (n) = g summed over its rows, for g (m, n) and
// x (m, k), in one cuBLASLt call (f32, bf16 or f16, BGRADB; db of dw's
// dtype, the sums in f32 rounded once); false as above.
bool cublaslt_matmul_bias_grad(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db);

}  // namespace volt::cuda
