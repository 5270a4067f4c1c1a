// The CPU kernel of the reduction prims (sum, amax, amin, argmax, argmin over
// any dims); sums of floating inputs accumulate in f64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <volt/tensor/cpu/column_sums.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/loops.h>

namespace volt::cpu {
namespace {

template <class T>
T fmax_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a > b ? a : b;
}
template <class T>
T fmin_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? a : b;
}

// An element as the sum adds it: a bf16 widened to f32 (exactly), else as it is.
template <class T>
inline auto widened(T v) {
  if constexpr (std::is_same_v<T, BF16>) return v.to_float();
  else return v;
}

// o[j] = sum over i < rows of in[i, j] (row stride `cols`), for j in [j0, j1),
// each column added in row order.  Blocks of kBlock columns keep their sums
// in registers across all rows (a bias gradient: (B*T, n) -> (n)); adding
// into o row by row loaded and stored every sum for every row.  The same
// additions in the same order either way.
template <class T, class Acc>
void sum_columns(const T* in, int64_t rows, int64_t cols, int64_t j0, int64_t j1, Acc* o) {
  constexpr int64_t kBlock = 32;
  int64_t j = j0;
  for (; j + kBlock <= j1; j += kBlock) {
    Acc s[kBlock] = {};
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = in + i * cols + j;
#pragma omp simd
      for (int64_t c = 0; c < kBlock; ++c) s[c] += static_cast<Acc>(widened(row[c]));
    }
    for (int64_t c = 0; c < kBlock; ++c) o[j + c] = s[c];
  }
  if (j == j1) return;
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = in + i * cols;
    for (int64_t c = j; c < j1; ++c) o[c] += static_cast<Acc>(widened(row[c]));
  }
}

template <class T>
void run_reduce(const OpCall& call, Tensor& out) {
  const Tensor& a = call.args[0].tensor;
  const auto& dims = call.attrs.ints;
  const int64_t nd = a.dim();
  // For each input dim, the stride of the output index (0 if reduced).
  Shape out_strides(nd, 0);
  {
    int64_t acc = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!reduced) {
        out_strides[d] = acc;
        acc *= a.sizes()[d];
      }
    }
  }
  const int64_t n_out = out.numel();
  const T* in = static_cast<const T*>(a.raw_data());
  const int64_t n = a.numel();

  if (call.op == OpId::argmax || call.op == OpId::argmin) {
    int64_t dim = dims.empty() ? 0 : dims[0];
    bool is_max = call.op == OpId::argmax;
    int64_t* o = static_cast<int64_t*>(out.raw_data());
    if (nd == 0) {  // a zero-dim tensor: its one element is the extremum
      o[0] = 0;
      return;
    }
    int64_t len = a.sizes()[dim], st = a.strides()[dim];
    for (int64_t j = 0; j < n_out; ++j) {
      // Position of output j in the input, along the non-reduced dims.
      int64_t rem = j, base = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (d == dim) continue;
        int64_t idx = rem % a.sizes()[d];
        rem /= a.sizes()[d];
        base += idx * a.strides()[d];
      }
      int64_t best = 0;
      T bv = in[base];
      for (int64_t i = 1; i < len; ++i) {
        T v = in[base + i * st];
        bool nan_v = false, nan_b = false;
        if constexpr (std::is_floating_point_v<T>) {
          nan_v = std::isnan(v);
          nan_b = std::isnan(bv);
        }
        if (nan_b) break;
        if (nan_v || (is_max ? v > bv : v < bv)) {
          best = i;
          bv = v;
        }
      }
      o[j] = best;
    }
    return;
  }

  using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                 std::conditional_t<std::is_same_v<T, bool>, int64_t, int64_t>>;
  std::vector<Acc> acc(static_cast<size_t>(n_out));
  bool is_sum = call.op == OpId::sum, is_max = call.op == OpId::amax;
  std::vector<bool> seen(is_sum ? 0 : static_cast<size_t>(n_out), false);
  // A contiguous input summed over its leading dims (a bias gradient: (B, n) ->
  // (n)) or its trailing dims: plain loops that vectorise, adding in the same
  // order as the general walk below, so the result is the same to the bit.
  int64_t lead = 0;  // reduced dims are [0, lead) or [lead, nd)
  bool leading = false, trailing = false;
  if (is_sum && n > 0 && a.is_contiguous() && !dims.empty()) {
    std::vector<bool> red(nd, false);
    for (int64_t d : dims) red[d] = true;
    lead = 0;
    while (lead < nd && red[lead]) ++lead;
    leading = std::all_of(red.begin() + lead, red.end(), [](bool r) { return !r; });
    int64_t first = 0;
    while (first < nd && !red[first]) ++first;
    trailing = !leading && std::all_of(red.begin() + first, red.end(), [](bool r) { return r; });
    if (trailing) lead = first;
  }
  if (leading || trailing) {
    int64_t outer = 1;
    for (int64_t d = 0; d < lead; ++d) outer *= a.sizes()[d];
    const int64_t inner = n / outer;
    Acc* o = acc.data();
    // Each output is one thread's chain, in the walk's order: threads split the
    // outputs, never a sum.
    if (leading) {  // out[j] = sum_i in[i, j]
      cpu::parallel_for(inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(outer, 1)),
                        [&](int64_t j0, int64_t j1) { sum_columns(in, outer, inner, j0, j1, o); });
    } else {  // out[i] = sum_j in[i, j]
      cpu::parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                        [&](int64_t i0, int64_t i1) {
                          int64_t i = i0;
                          // Four rows at once: four independent chains in flight.
                          for (; i + 4 <= i1; i += 4) {
                            const T* r0 = in + i * inner;
                            Acc s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                            for (int64_t j = 0; j < inner; ++j) {
                              s0 += static_cast<Acc>(r0[j]);
                              s1 += static_cast<Acc>(r0[inner + j]);
                              s2 += static_cast<Acc>(r0[2 * inner + j]);
                              s3 += static_cast<Acc>(r0[3 * inner + j]);
                            }
                            o[i] = s0, o[i + 1] = s1, o[i + 2] = s2, o[i + 3] = s3;
                          }
                          for (; i < i1; ++i) {
                            const T* row = in + i * inner;
                            Acc s = 0;
                            for (int64_t j = 0; j < inner; ++j) s += static_cast<Acc>(row[j]);
                            o[i] = s;
                          }
                        });
    }
  } else if (n > 0) {
    // Walk the input in index order.
    Shape idx(nd, 0);
    int64_t in_off = 0, out_off = 0;
    for (int64_t k = 0; k < n; ++k) {
      Acc v = static_cast<Acc>(in[in_off]);
      if (is_sum) {
        acc[out_off] += v;
      } else if (!seen[out_off]) {
        acc[out_off] = v;
        seen[out_off] = true;
      } else {
        acc[out_off] = is_max ? fmax_nan(acc[out_off], v) : fmin_nan(acc[out_off], v);
      }
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++idx[d] < a.sizes()[d]) {
          in_off += a.strides()[d];
          out_off += out_strides[d];
          break;
        }
        in_off -= (a.sizes()[d] - 1) * a.strides()[d];
        out_off -= (a.sizes()[d] - 1) * out_strides[d];
        idx[d] = 0;
      }
    }
  }
  VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
    scalar_t* o = static_cast<scalar_t*>(out.raw_data());
    for (int64_t j = 0; j < n_out; ++j) o[j] = static_cast<scalar_t>(acc[j]);
  });
}

}  // namespace

void reduce_kernel(const OpCall& call, Tensor& out) {
  VOLT_DISPATCH_DTYPE(call.args[0].tensor.dtype(), [&] { run_reduce<scalar_t>(call, out); });
}

void sum_bf16_columns(const BF16* in, int64_t rows, int64_t cols, float* out) {
  // As run_reduce sums an f32 (rows, cols) over its leading dim: each column
  // one f64 chain in row order, one thread's, then rounded to f32 once.
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  double* o = acc.data();
  cpu::parallel_for(cols, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(rows, 1)),
                    [&](int64_t j0, int64_t j1) { sum_columns(in, rows, cols, j0, j1, o); });
  for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
}

}  // namespace volt::cpu
