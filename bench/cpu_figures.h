// volt_bench's CPU figures besides the matrix (bench/cpu_figures.cpp): the
// machine's FMA peak, each GEMM of the seed model as a fraction of it, a cell
// run while busy processes compete for the cores, and a full MNIST epoch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace volt::bench_cpu {

struct Figure {
  std::string name;
  std::vector<std::pair<std::string, double>> values;
  std::string note;
};

// GFLOP/s of a register-only fused multiply-add loop on `threads` threads at
// once, with the widest vectors the GEMM kernels use here.
double fma_peak_gflops(int threads);

// GFLOP/s of a register-only vdpbf16ps loop (24 independent accumulators, 64
// flops each) on `threads` threads at once; 0 on a CPU without AVX512_BF16.
double bf16_dot_peak_gflops(int threads);

// GFLOP/s of a tile-only AMX loop (4 independent tdpbf16ps, 16384 flops
// each) on `threads` threads at once; 0 where AMX is not available.
double amx_bf16_peak_gflops(int threads);

// matmul of two bf16 (size, size) tensors on `threads` threads: GFLOP/s and
// its fractions of `dot_peak_gflops` (the vdpbf16ps loop) and of
// `amx_peak_gflops` (the tdpbf16ps loop), both for those threads.
Figure bf16_gemm(int64_t size, int threads, double dot_peak_gflops, double amx_peak_gflops);

// The bf16 matmul (m, k) x (k, n) on the current threads, with A and B laid
// out as a linear layer's products lay them out: "x W^T" (B a transposed
// weight), "g W" (both row-major), "g^T x" (A transposed); GFLOP/s and the
// fraction of `amx_peak_gflops` (the tdpbf16ps loop for these threads).
Figure bf16_gemm_shape(const std::string& what, int64_t m, int64_t k, int64_t n, const std::string& layout,
                       double amx_peak_gflops);

// The seed model's GEMMs at `batch` (forward x W^T + b, input gradient g W,
// weight gradient g^T x, for 784x784, 784x28 and 28x10): GFLOP/s and the
// fraction of `peak_gflops`, with the current thread count.
std::vector<Figure> gemm_shapes(int64_t batch, double peak_gflops);

// One hidden layer of the seed model (784 -> 784, dropout 0.1) at `batch`:
// linear -> ReLU -> dropout as nn::functional::linear_relu_dropout (one GEMM
// with the bias, the ReLU and the mask in its store) against the chain of
// eager ops, forward + backward and forward alone, timed in turns; microseconds.
Figure fused_linear_layer(int64_t batch);

// Runs `cell` (it returns steps/s) with 1 and 2 threads while `busy` processes
// spin on the CPU, and without them, `rounds` rounds of the two thread counts
// interleaved; one figure per thread count, medians (and the busy extremes).
std::vector<Figure> busy_machine(const std::string& what, int busy, int rounds,
                                 const std::function<double()>& cell);

// One epoch of examples/mnist_mlp's training loop on the MNIST in `dir`: a
// shuffled DataLoader, forward, loss, zero_grad, backward, Adam's step and the
// loss read back each step; `mode` eager or jit.
Figure mnist_epoch(const std::string& dir, const std::string& mode, int64_t batch);

}  // namespace volt::bench_cpu
