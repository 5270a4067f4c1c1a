// The CPU GEMM's register-tiled kernels, one set per instruction set, chosen
// at run time from the CPU's features (tensor/cpu/gemm_kernels.cpp); the
// packing, blocking and threading around them is tensor/cpu/matmul.cpp.
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

// A hook a kernel calls on each block of C it has finished (after the whole sum
// over k, the column bias and the ReLU): rows [i0, i0 + rows), columns
// [j0, j0 + cols) of the C it was given, c pointing at element (i0, j0).
template <class T>
struct BlockHook {
  void (*fn)(void* ctx, T* c, int64_t ldc, int64_t i0, int64_t j0, int64_t rows, int64_t cols) = nullptr;
  void* ctx = nullptr;
};

template <class T>
struct GemmKernels {
  // The packed tile: C[0:rows, 0:cols] (= or +=) Ap Bp over kc, for one panel of
  // A (mr rows, k-major, zero-padded) and one of B (nr columns, k-major,
  // zero-padded); then + bias[0:cols] (when given) and max(., 0) (when relu).
  int mr, nr;
  void (*packed_tile)(const T* ap, const T* bp, int64_t kc, T* c, int64_t ldc, int rows, int cols,
                      bool accumulate, const T* bias, bool relu);
  // C (m, n; row stride ldc) = A (m, k) B (k, n) (+ bias) (relu) without
  // packing, for few rows or a short k; false when the layout does not suit
  // (then pack).  Calls done.fn (when set) once on each finished block of C;
  // the blocks are disjoint and cover C.
  bool (*skinny)(const T* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const T* b, int64_t n,
                 int64_t brs, int64_t bcs, T* c, int64_t ldc, const T* bias, bool relu, const BlockHook<T>& done);
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

// ---- the GEMM with its store ----
// What happens to each element of C after the sum over k, in this order: + the
// bias, max(., 0), then the epilogue.
//
// The epilogue is applied once to every finished block of C -- after the whole
// sum over k, the bias and the ReLU -- while the block is still in cache.  The
// block is rows [i0, i0 + rows) and columns [j0, j0 + cols) of C; c points at
// its element (i0, j0); ldc is C's row stride.  Blocks are disjoint and cover C
// exactly once; different threads may run it at the same time on different
// blocks, so it must only touch its own block (and data indexed by it).
// (The kernels' own BlockHook: the same function and context.)
template <class T>
using BasicGemmEpilogue = BlockHook<T>;
template <class T>
struct BasicGemmStore {
  const T* bias = nullptr;    // bias[j] per column of C, or bias[i] per row when bias_per_row
  bool bias_per_row = false;  // (a conv's NCHW output: one bias per output channel = row)
  bool relu = false;
  BasicGemmEpilogue<T> epilogue;  // after bias and ReLU
};
using GemmEpilogue = BasicGemmEpilogue<float>;
using GemmStore = BasicGemmStore<float>;

// C (m, n; row stride ldc >= n) = A (m, k; element strides ars, acs) B (k, n;
// brs, bcs), then the store.  C must not overlap A or B.  The same bits as the
// plain product followed by the same elementwise work, at any thread count and
// on every instruction set.
void gemm_f32(const float* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const float* b, int64_t n,
              int64_t brs, int64_t bcs, float* c, int64_t ldc, const GemmStore& store = {});
void gemm_f64(const double* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const double* b, int64_t n,
              int64_t brs, int64_t bcs, double* c, int64_t ldc, const BasicGemmStore<double>& store = {});

}  // namespace volt::cpu

namespace volt {
class Tensor;
struct PhiloxState;
// out = max(x W^T + bias, 0) on the CPU in one pass: the bias and the ReLU are
// applied as each tile of the product is stored.  x (*, in), w (out, in), bias
// (out) or null, out contiguous (*, out), all f32 or all f64.  Bit for bit what
// relu(linear(x, w, bias)) gives.
void cpu_linear_relu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// out = dropout(max(x W^T + bias, 0), p) in one pass (tensor/cpu/linear_dropout.cpp):
// the mask drawn in the GEMM's epilogue from the Philox draw `rng` (its seed,
// and the first of out.numel() counters), exactly as the eager dropout op
// draws it; p = 0 draws nothing.  Bit for bit what dropout(relu(linear(x, w,
// bias)), p) gives eagerly with the generator at `rng`.  Arguments as
// cpu_linear_relu's, p in [0, 1].
void cpu_linear_relu_dropout(const Tensor& x, const Tensor& w, const Tensor* bias, double p, PhiloxState rng,
                             Tensor& out);
// Its gradient before the GEMMs: out = g / (1 - p) where y > 0, else 0 (g where
// y > 0 when p = 0) -- y > 0 exactly where an element was kept and its input
// to the ReLU positive, so the chain's dropout and relu gradients, bit for bit.
// y (its output), g and out contiguous, of one size and dtype (f32, f64 or
// bf16: g / (1 - p) computed in f32 and rounded once).
void cpu_relu_dropout_backward(const Tensor& y, const Tensor& g, double p, Tensor& out);
// dropout(relu(z), p) of a bf16 z as the eager chain gives it (each op on f32
// copies, rounded once): out = bf16((relu(z) * m) * (1 / (1 - p))), m the keep
// mask of the Philox draw at `rng` in f32, element by element; one pass, no
// copies.  z and out contiguous bf16 of one size.
void cpu_relu_dropout_bf16(const Tensor& z, double p, PhiloxState rng, Tensor& out);
}  // namespace volt
