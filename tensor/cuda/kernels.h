// The CUDA source of every kernel the eager CUDA backend runs.  Each function
// returns plain text (the prelude of tensor/cuda/nvrtc.h is prepended when it
// is compiled), so these compile and are tested with NVRTC on a machine
// without a GPU.
//
//   ElementwiseSpec s{OpId::add, DType::f32, {{false, DType::f32}, {true, DType::f32}}, false};
//   elementwise_source(s);   // extern "C" __global__ void volt_add_f32_f32_s_1d(...)
//                            //   ... const float a = (float)in0[i]; const float b = (float)s1;
//                            //   out[i] = (float)((a + b));
#pragma once
#include <string>
#include <vector>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/dtype.h>
#include <volt/tensor/op_table.h>

namespace volt::cuda {

// An operand of an elementwise kernel: a tensor of `dtype`, or a scalar (a
// double kernel parameter converted in the kernel).
struct EwOperand {
  bool is_scalar = false;
  DType dtype = DType::f32;
};

// One prim over one output: the op-table expression of `op` on the operands,
// each converted to the op's compute dtype first (the CPU backend's rule).
// `strided`: operands and output are addressed through a volt_index (any
// strides, broadcast); otherwise every tensor is contiguous in the output's shape.
struct ElementwiseSpec {
  OpId op = OpId::add;
  DType out = DType::f32;
  std::vector<EwOperand> operands;
  bool strided = false;
  DType compute = DType::f32;  // the dtype the expression is evaluated in
};

// The spec the CUDA backend uses for an elementwise prim `call` producing
// `out`: scalars and zero-dim CPU tensors become scalar operands.
ElementwiseSpec elementwise_spec(const OpCall& call, DType out, bool strided);
std::string elementwise_name(const ElementwiseSpec& s);
std::string elementwise_source(const ElementwiseSpec& s);

// Row reductions: y[r] = op(x[r * row_stride + j * elem_stride] for j < len),
// for r < rows, one block per row.
// sum accumulates floats in double and integers in long long (as the CPU does);
// amax/amin propagate NaN; argmax/argmin return the first index of the extremum
// (or of the first NaN).
std::string reduce_name(OpId op, DType in, DType out);
std::string reduce_source(OpId op, DType in, DType out);

// out[i] = lo + (hi - lo) * U(seed, offset + i): the Philox draw of tensor/philox.inc.
std::string uniform_name(DType t);
std::string uniform_source(DType t);

// out[i] = value.
std::string fill_name(DType t);
std::string fill_source(DType t);

// Softmax cross-entropy with the row functions of tensor/cross_entropy.inc.
// Forward, one block: loss[0] = mean over rows of the row losses.  Backward,
// one thread per row: gx = g[0] / N * (softmax - onehot).  A target outside
// [0, C) makes the result NaN and is recorded in the error word (runtime.h).
std::string cross_entropy_name(DType t, bool backward);
std::string cross_entropy_source(DType t, bool backward);

// Fused optimizers over a table of parameters (tensor/cuda/optim.h).
std::string adam_name(DType t);
std::string adam_source(DType t);
std::string sgd_name(DType t);
std::string sgd_source(DType t);

}  // namespace volt::cuda
