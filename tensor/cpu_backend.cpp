// The CPU backend: loops over any strides (flat, threaded and vectorised when
// every operand is plain or one broadcast element); GEMMs in cpu_matmul.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include <volt/tensor/backend.h>
#include <volt/tensor/cpu_threads.h>
#include <volt/tensor/op_exprs.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
// The Philox text itself (also compiled in random.cpp): inlined here, the draw
// loop vectorises across elements instead of calling out once per element.
#include <volt/tensor/philox.inc>

namespace volt {

// The row functions of softmax cross-entropy, shared with the CUDA kernels.
namespace ce {
using std::exp;
using std::log;
#include <volt/tensor/cross_entropy.inc>
}  // namespace ce

void cpu_matmul(const Tensor& a, const Tensor& b, Tensor& out);                   // cpu_matmul.cpp
void cpu_linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);  // cpu_matmul.cpp
void cpu_window(const OpCall& call, Tensor& out);                                   // cpu_conv.cpp

namespace {

// Elements (or Philox draws) a loop needs before it splits over threads.
constexpr int64_t kParallelGrain = int64_t(1) << 15;

// ---------------------------------------------------------------- strided walk
// An operand of an elementwise loop: a base pointer and element strides already
// broadcast to the output shape (0 along broadcast dims).
struct Operand {
  const char* ptr;
  Shape strides;
  size_t esize;
};

Operand operand_of(const Tensor& t, const Shape& out_shape) {
  Operand o{static_cast<const char*>(t.raw_data()), Shape(out_shape.size(), 0), dtype_size(t.dtype())};
  size_t lead = out_shape.size() - t.sizes().size();
  for (size_t i = 0; i < t.sizes().size(); ++i)
    o.strides[lead + i] = t.sizes()[i] == 1 ? 0 : t.strides()[i];
  return o;
}

bool is_plain(const Operand& o, const Shape& shape) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (o.strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool is_scalar(const Operand& o) {
  return std::all_of(o.strides.begin(), o.strides.end(), [](int64_t s) { return s == 0; });
}

// Which operands are one element broadcast to the whole output (bit k: operand
// k), when every other one is plain; -1 when some operand is neither.
template <size_t N>
int scalar_mask(const std::array<Operand, N>& in, const Shape& shape) {
  int mask = 0;
  for (size_t k = 0; k < N; ++k) {
    if (is_plain(in[k], shape)) continue;
    if (!is_scalar(in[k])) return -1;
    mask |= 1 << k;
  }
  return mask;
}

// Calls f.template operator()<M>() with M = mask, for masks of N operands.
template <size_t N, class F>
void with_mask(int mask, F&& f) {
  static_assert(N >= 1 && N <= 3);
  switch (mask) {
    case 0: return f.template operator()<0>();
    case 1: return f.template operator()<1>();
    case 2: if constexpr (N >= 2) return f.template operator()<2>(); else break;
    case 3: if constexpr (N >= 2) return f.template operator()<3>(); else break;
    case 4: if constexpr (N >= 3) return f.template operator()<4>(); else break;
    case 5: if constexpr (N >= 3) return f.template operator()<5>(); else break;
    case 6: if constexpr (N >= 3) return f.template operator()<6>(); else break;
    case 7: if constexpr (N >= 3) return f.template operator()<7>(); else break;
    default: break;
  }
}

// Operand k's element i, where bit k of M says it is one broadcast element.
template <int M, size_t K, class P>
inline auto elem(const P& p, int64_t i) {
  if constexpr ((M >> K) & 1) return *std::get<K>(p);
  else return std::get<K>(p)[i];
}

// out[i] = f(in0[i], ...) over [0, n) for operands each plain or one broadcast
// element (M), split over threads when large; the loops vectorise.
template <int M, class R, class F, class... P>
void flat_loop(R* o, int64_t n, const std::tuple<P...>& p, const F& f) {
  cpu::parallel_for(n, kParallelGrain, [&](int64_t i0, int64_t i1) {
    if constexpr (sizeof...(P) == 1)
      for (int64_t i = i0; i < i1; ++i) o[i] = static_cast<R>(f(elem<M, 0>(p, i)));
    else if constexpr (sizeof...(P) == 2)
      for (int64_t i = i0; i < i1; ++i) o[i] = static_cast<R>(f(elem<M, 0>(p, i), elem<M, 1>(p, i)));
    else
      for (int64_t i = i0; i < i1; ++i)
        o[i] = static_cast<R>(f(elem<M, 0>(p, i), elem<M, 1>(p, i), elem<M, 2>(p, i)));
  });
}

// out[i] = f(in0[...], in1[...], ...) for every element; out is contiguous.
template <class R, class C, size_t N, class F>
void elementwise(Tensor& out, const std::array<Operand, N>& in, F f) {
  const Shape& shape = out.sizes();
  int64_t n = out.numel();
  R* o = static_cast<R*>(out.raw_data());
  if (const int mask = scalar_mask(in, shape); mask >= 0 && n > 0) {
    auto ptr = [&](size_t k) { return reinterpret_cast<const C*>(in[k].ptr); };
    with_mask<N>(mask, [&]<int M>() {
      if constexpr (N == 1) flat_loop<M, R>(o, n, std::tuple{ptr(0)}, f);
      else if constexpr (N == 2) flat_loop<M, R>(o, n, std::tuple{ptr(0), ptr(1)}, f);
      else flat_loop<M, R>(o, n, std::tuple{ptr(0), ptr(1), ptr(2)}, f);
    });
    return;
  }
  // General case: walk the output in order, rows of the last dim at a time.
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (n == 0) return;
  if (nd == 0) {
    if constexpr (N == 1) o[0] = static_cast<R>(f(*reinterpret_cast<const C*>(in[0].ptr)));
    else if constexpr (N == 2)
      o[0] = static_cast<R>(f(*reinterpret_cast<const C*>(in[0].ptr), *reinterpret_cast<const C*>(in[1].ptr)));
    else
      o[0] = static_cast<R>(f(*reinterpret_cast<const C*>(in[0].ptr), *reinterpret_cast<const C*>(in[1].ptr),
                              *reinterpret_cast<const C*>(in[2].ptr)));
    return;
  }
  const int64_t inner = shape[nd - 1];
  const int64_t rows = n / inner;
  cpu::parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    std::array<const C*, N> p;
    std::array<int64_t, N> s;
    int64_t rem = r;
    for (size_t k = 0; k < N; ++k) {
      p[k] = reinterpret_cast<const C*>(in[k].ptr);
      s[k] = in[k].strides[nd - 1];
    }
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) p[k] += idx * in[k].strides[d];
    }
    R* orow = o + r * inner;
    for (int64_t j = 0; j < inner; ++j) {
      if constexpr (N == 1) orow[j] = static_cast<R>(f(p[0][j * s[0]]));
      else if constexpr (N == 2) orow[j] = static_cast<R>(f(p[0][j * s[0]], p[1][j * s[1]]));
      else orow[j] = static_cast<R>(f(p[0][j * s[0]], p[1][j * s[1]], p[2][j * s[2]]));
    }
  }
  });
}

// Copies a tensor of any strides into a contiguous one of another dtype.
template <class R>
void convert_into(Tensor& out, const Tensor& src) {
  Operand o = operand_of(src, out.sizes());
  VOLT_DISPATCH_DTYPE(src.dtype(), [&] {
    elementwise<R, scalar_t, 1>(out, {o}, [](scalar_t a) { return static_cast<R>(a); });
  });
}

// Operands in the compute dtype C: tensors of other dtypes are converted first,
// scalars become one-element buffers with zero strides.
struct Prepared {
  std::vector<Tensor> keep;  // keeps converted copies and scalar buffers alive
  std::vector<Operand> ops;
};

Prepared prepare(const OpCall& call, size_t first, DType c, const Shape& out_shape) {
  Prepared p;
  for (size_t i = first; i < call.args.size(); ++i) {
    const Value& v = call.args[i];
    Tensor t;
    if (v.is_tensor) {
      t = v.tensor;
      if (t.dtype() != c) {
        Tensor conv = Tensor::empty(t.sizes(), c, kCPU);
        VOLT_DISPATCH_DTYPE(c, [&] { convert_into<scalar_t>(conv, t); });
        t = conv;
      }
    } else {
      t = Tensor::empty({}, c, kCPU);
      VOLT_DISPATCH_DTYPE(c, [&] { *static_cast<scalar_t*>(t.raw_data()) = static_cast<scalar_t>(v.scalar.value); });
    }
    p.keep.push_back(t);
    p.ops.push_back(operand_of(t, out_shape));
  }
  return p;
}

// ---------------------------------------------------------------- elementwise ops

// Each kernel computes the op table's expression (tensor/op_exprs.h): C is the
// compute dtype, the result converted to the output's.
#define VOLT_EXPR1(op, R) [](C x) { return static_cast<R>(op_exprs::expr_##op<R>(x)); }
#define VOLT_EXPR2(op, R) [](C a, C b) { return static_cast<R>(op_exprs::expr_##op<R>(a, b)); }

template <class C>
void run_unary(OpId op, const Operand& a, Tensor& out) {
  std::array<Operand, 1> in{a};
  switch (op) {
    case OpId::neg:
      if constexpr (!std::is_same_v<C, bool>) elementwise<C, C, 1>(out, in, VOLT_EXPR1(neg, C));
      return;
    case OpId::abs:
      if constexpr (!std::is_same_v<C, bool>) elementwise<C, C, 1>(out, in, VOLT_EXPR1(abs, C));
      return;
    case OpId::logical_not: elementwise<bool, C, 1>(out, in, VOLT_EXPR1(logical_not, bool)); return;
    default: break;
  }
  // Floating unary ops: integer inputs were converted to the float output type already.
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case OpId::exp: elementwise<C, C, 1>(out, in, VOLT_EXPR1(exp, C)); return;
      case OpId::log: elementwise<C, C, 1>(out, in, VOLT_EXPR1(log, C)); return;
      case OpId::sqrt: elementwise<C, C, 1>(out, in, VOLT_EXPR1(sqrt, C)); return;
      case OpId::rsqrt: elementwise<C, C, 1>(out, in, VOLT_EXPR1(rsqrt, C)); return;
      case OpId::tanh: elementwise<C, C, 1>(out, in, VOLT_EXPR1(tanh, C)); return;
      case OpId::sigmoid: elementwise<C, C, 1>(out, in, VOLT_EXPR1(sigmoid, C)); return;
      case OpId::reciprocal: elementwise<C, C, 1>(out, in, VOLT_EXPR1(reciprocal, C)); return;
      default: break;
    }
  }
  VOLT_FAIL(op_name(op), "has no CPU kernel for this dtype");
}

template <class C>
void run_binary(OpId op, const std::array<Operand, 2>& in, Tensor& out) {
  switch (op) {
    case OpId::add: elementwise<C, C, 2>(out, in, VOLT_EXPR2(add, C)); return;
    case OpId::sub: elementwise<C, C, 2>(out, in, VOLT_EXPR2(sub, C)); return;
    case OpId::mul: elementwise<C, C, 2>(out, in, VOLT_EXPR2(mul, C)); return;
    case OpId::div:
      if constexpr (std::is_floating_point_v<C>) elementwise<C, C, 2>(out, in, VOLT_EXPR2(div, C));
      return;
    case OpId::pow: elementwise<C, C, 2>(out, in, VOLT_EXPR2(pow, C)); return;
    case OpId::maximum: elementwise<C, C, 2>(out, in, VOLT_EXPR2(maximum, C)); return;
    case OpId::minimum: elementwise<C, C, 2>(out, in, VOLT_EXPR2(minimum, C)); return;
    case OpId::logical_and: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(logical_and, bool)); return;
    case OpId::logical_or: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(logical_or, bool)); return;
    case OpId::eq: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(eq, bool)); return;
    case OpId::ne: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(ne, bool)); return;
    case OpId::lt: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(lt, bool)); return;
    case OpId::le: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(le, bool)); return;
    case OpId::gt: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(gt, bool)); return;
    case OpId::ge: elementwise<bool, C, 2>(out, in, VOLT_EXPR2(ge, bool)); return;
    default: VOLT_FAIL(op_name(op), "has no CPU kernel");
  }
}

#undef VOLT_EXPR1
#undef VOLT_EXPR2

// NaN-propagating max and min, for the reductions.
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

// ---------------------------------------------------------------- random

// o[i] = U[lo, hi) for element i of the draw (seed, offset): the same expression
// as random.cpp and the generated kernels, inlined so that the ten Philox
// rounds run on vectors of elements.  o: (n)
// o[i] = U[lo, hi) for element first + i of the draw (seed, offset), i < n.
template <class T>
void fill_uniform_block(T* o, int64_t n, uint64_t first, uint64_t seed, uint64_t offset, T lo, T hi) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) o[i] = volt_uniform_range_f32(seed, offset, first + i, lo, hi);
    else o[i] = volt_uniform_range_f64(seed, offset, first + i, lo, hi);
  }
}

// o: (n), element i of the draw (seed, offset) at o[i]: the same expression as
// random.cpp and the generated kernels, inlined so that the ten Philox rounds
// run on vectors of elements (blocks of 4096, split over threads when large).
template <class T>
void fill_uniform(T* o, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  cpu::parallel_for(blocks, kParallelGrain / kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t first = b * kBlock;
      fill_uniform_block(o + first, std::min(kBlock, n - first), static_cast<uint64_t>(first), seed, offset, lo, hi);
    }
  });
}

// ---------------------------------------------------------------- reductions

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
                        [&](int64_t j0, int64_t j1) {
                          for (int64_t i = 0; i < outer; ++i) {
                            const T* row = in + i * inner;
                            for (int64_t j = j0; j < j1; ++j) o[j] += static_cast<Acc>(row[j]);
                          }
                        });
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

// ---------------------------------------------------------------- the backend

// Blocks from this size up are kept for reuse when their tensor dies.
constexpr size_t kLargeBlock = size_t(1) << 16;
// At most this many bytes wait in the cache; beyond it blocks go back to the system.
constexpr size_t kLargeCacheLimit = size_t(1) << 30;

// A training step frees and allocates the same large tensors every step (the
// gradients, the activations of a big batch).  Fresh memory from the system
// costs a page fault and a zeroed page per 4 KiB, so freed large blocks are kept
// by exact size and handed out again; small blocks go through malloc.
class LargeBlockCache {
 public:
  // n: a multiple of 64 and >= kLargeBlock; nbytes: what the caller asked for.
  void* allocate(size_t n, size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = free_.find(n); it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_bytes_ -= n;
        live_[p] = n;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, n);
    if (!p) {  // give the cached blocks back and try once more
      trim();
      p = std::aligned_alloc(64, n);
    }
    VOLT_CHECK(p != nullptr, "allocate", "out of memory allocating " << nbytes << " bytes on the CPU");
    std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = n;
    return p;
  }
  // Returns false when p is not a large block (the caller frees it).
  bool release(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t n = it->second;
    live_.erase(it);
    if (cached_bytes_ + n > kLargeCacheLimit) {
      std::free(p);
    } else {
      free_.emplace(n, p);
      cached_bytes_ += n;
    }
    return true;
  }
  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [n, p] : free_) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;      // handed out: block -> size
  std::unordered_multimap<size_t, void*> free_;  // kept: size -> block
  size_t cached_bytes_ = 0;
};

class CpuBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, int) override {
    size_t n = (nbytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    if (n >= kLargeBlock) return large_.allocate(n, nbytes);
    void* p = std::aligned_alloc(64, n);
    VOLT_CHECK(p != nullptr, "allocate", "out of memory allocating " << nbytes << " bytes on the CPU");
    return p;
  }
  void deallocate(void* p, int) override {
    if (!large_.release(p)) std::free(p);
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    VOLT_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy_",
               "the CPU backend copies between CPU tensors only");
    VOLT_CHECK(dst.dtype() == src.dtype() && dst.sizes() == src.sizes(), "copy_",
               "expected " << dst.meta_str() << ", got " << src.meta_str());
    if (dst.is_contiguous() && src.is_contiguous()) {
      std::memmove(dst.raw_data(), src.raw_data(), dst.numel() * dtype_size(dst.dtype()));
      return;
    }
    // Through a contiguous temporary, so overlapping views stay correct.
    Tensor tmp = Tensor::empty(src.sizes(), src.dtype(), kCPU);
    VOLT_DISPATCH_DTYPE(src.dtype(), [&] { convert_into<scalar_t>(tmp, src); });
    Operand o = operand_of(tmp, dst.sizes());
    // Scatter into dst's strides by walking dst as the "input" of a reversed copy.
    VOLT_DISPATCH_DTYPE(dst.dtype(), [&] {
      const scalar_t* s = reinterpret_cast<const scalar_t*>(o.ptr);
      scalar_t* d = static_cast<scalar_t*>(dst.raw_data());
      const Shape& sh = dst.sizes();
      int64_t nd = dst.dim(), n = dst.numel();
      Shape idx(nd, 0);
      int64_t off = 0;
      for (int64_t k = 0; k < n; ++k) {
        d[off] = s[k];
        for (int64_t dd = nd - 1; dd >= 0; --dd) {
          if (++idx[dd] < sh[dd]) {
            off += dst.strides()[dd];
            break;
          }
          off -= (sh[dd] - 1) * dst.strides()[dd];
          idx[dd] = 0;
        }
      }
    });
  }

  bool fuses(OpId op) const override { return has_fused_kernel(op); }

  void run(const OpCall& call, std::vector<Tensor>& outs) override {
    Tensor& out = outs[0];
    const OpInfo& info = op_info(call.op);
    for (const Value& v : call.args)
      if (v.is_tensor && v.tensor.defined())
        VOLT_CHECK(v.tensor.has_data(), info.name, "got a tensor without data (" << v.tensor.meta_str() << ")");
    switch (info.kind) {
      case OpKind::Unary: {
        DType c = compute_dtype(call);
        Prepared p = prepare(call, 0, c, out.sizes());
        VOLT_DISPATCH_DTYPE(c, [&] { run_unary<scalar_t>(call.op, p.ops[0], out); });
        return;
      }
      case OpKind::Binary:
      case OpKind::Compare: {
        DType c = compute_dtype(call);
        Prepared p = prepare(call, 0, c, out.sizes());
        VOLT_DISPATCH_DTYPE(c, [&] { run_binary<scalar_t>(call.op, {p.ops[0], p.ops[1]}, out); });
        return;
      }
      case OpKind::Ternary: {
        DType c = compute_dtype(call);
        Prepared cond = prepare(call, 0, DType::b8, out.sizes());
        Prepared ab = prepare(call, 1, c, out.sizes());
        where_kernel({cond.ops[0], ab.ops[0], ab.ops[1]}, out);
        return;
      }
      case OpKind::Convert:
      case OpKind::Copy:
        VOLT_DISPATCH_DTYPE(out.dtype(), [&] { convert_into<scalar_t>(out, call.args[0].tensor); });
        return;
      case OpKind::Random: {
        int64_t n = out.numel();
        const Attrs& at = call.attrs;
        if (out.dtype() == DType::f32) {
          fill_uniform(static_cast<float*>(out.raw_data()), n, at.seed, at.offset,
                       static_cast<float>(at.a), static_cast<float>(at.b));
        } else {
          fill_uniform(static_cast<double*>(out.raw_data()), n, at.seed, at.offset, at.a, at.b);
        }
        return;
      }
      case OpKind::Factory:
        VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
          scalar_t* o = static_cast<scalar_t*>(out.raw_data());
          if (call.op == OpId::arange) {  // start a, step b
            for (int64_t i = 0; i < out.numel(); ++i)
              o[i] = static_cast<scalar_t>(call.attrs.a + static_cast<double>(i) * call.attrs.b);
            return;
          }
          scalar_t v = static_cast<scalar_t>(call.attrs.a);
          std::fill(o, o + out.numel(), v);
        });
        return;
      case OpKind::Pad: {
        VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
          scalar_t* o = static_cast<scalar_t*>(out.raw_data());
          std::fill(o, o + out.numel(), scalar_t{});
        });
        const Tensor& a = call.args[0].tensor;
        Tensor inner = out.narrow(call.attrs.ints[0], call.attrs.ints[1], a.size(call.attrs.ints[0]));
        copy(inner, a);
        return;
      }
      case OpKind::Reduce:
        VOLT_DISPATCH_DTYPE(call.args[0].tensor.dtype(), [&] { run_reduce<scalar_t>(call, out); });
        return;
      case OpKind::Matmul:
        if (call.op == OpId::matmul) cpu_matmul(call.args[0].tensor, call.args[1].tensor, out);
        else cpu_linear(call.args[0].tensor, call.args[1].tensor,
                        call.args.size() == 3 ? &call.args[2].tensor : nullptr, out);
        return;
      case OpKind::Window:
        cpu_window(call, out);
        return;
      case OpKind::Composite:
        VOLT_CHECK(fuses(call.op), info.name, "is a composite op without a fused CPU kernel");
        cross_entropy_kernel(call, out);
        return;
      default:
        VOLT_FAIL(info.name, "has no CPU kernel");
    }
  }

 private:
  // cross_entropy (logits, target) -> loss, or cross_entropy_backward
  // (g, logits, target) -> gradient of the logits: one pass over the rows,
  // rows split over the threads (each row's result is the same whoever runs it;
  // the reduction adds the row losses in row order).
  static void cross_entropy_kernel(const OpCall& call, Tensor& out) {
    NoGradGuard no_grad;
    const size_t first = fused_logits_index(call.op);
    const bool backward = first == 1;
    const CrossEntropyOptions opt = cross_entropy_options(call.attrs);
    const Tensor x = call.args[first].tensor.contiguous();
    const Tensor& target = call.args[first + 1].tensor;
    const Tensor t = (target.dtype() == DType::i64 ? target : convert_element_type(target, DType::i64)).contiguous();
    const int64_t n = x.sizes()[0], c = x.sizes()[1];
    const int64_t* tp = static_cast<const int64_t*>(t.raw_data());
    const int64_t ignore = opt.ignore_index;
    int64_t count = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (tp[r] == ignore) continue;
      ++count;
      if (tp[r] >= 0 && tp[r] < c) continue;
      int64_t lo = tp[r], hi = tp[r];
      for (int64_t k = 0; k < n; ++k)
        if (tp[k] != ignore) lo = std::min(lo, tp[k]), hi = std::max(hi, tp[k]);
      VOLT_FAIL(op_name(call.op), "target values must lie in [0, " << c << "), got [" << lo << ", " << hi << "]");
    }
    const int64_t grain = std::max<int64_t>(1, 32768 / c);
    const double e = opt.label_smoothing;
    VOLT_DISPATCH_DTYPE(x.dtype(), [&] {
      if constexpr (std::is_floating_point_v<scalar_t>) {
        const scalar_t* xp = static_cast<const scalar_t*>(x.raw_data());
        scalar_t* o = static_cast<scalar_t*>(out.raw_data());
        if (!backward) {
          std::vector<double> rows(static_cast<size_t>(n), 0.0);
          cpu::parallel_for(n, grain, [&](int64_t b, int64_t end) {
            for (int64_t r = b; r < end; ++r)
              if (tp[r] != ignore) rows[r] = ce::volt_ce_row_loss(xp + r * c, c, tp[r], e);
          });
          if (opt.reduction == Reduction::None) {
            for (int64_t r = 0; r < n; ++r) o[r] = static_cast<scalar_t>(rows[r]);
            return;
          }
          double acc = 0;
          for (int64_t r = 0; r < n; ++r) acc += rows[r];
          o[0] = static_cast<scalar_t>(opt.reduction == Reduction::Sum ? acc : acc / static_cast<double>(count));
          return;
        }
        // The factor of each row: g (or g_i for None), over the rows counted for Mean.
        const Tensor& gt = call.args[0].tensor;
        Tensor gv;
        scalar_t scale = 0;
        if (opt.reduction == Reduction::None) {
          gv = (gt.dtype() == x.dtype() ? gt : convert_element_type(gt, x.dtype())).contiguous();
        } else {
          const scalar_t g = static_cast<scalar_t>(gt.item_double());
          scale = opt.reduction == Reduction::Sum ? g : static_cast<scalar_t>(g / static_cast<scalar_t>(count));
        }
        const scalar_t* gp = gv.defined() ? static_cast<const scalar_t*>(gv.raw_data()) : nullptr;
        cpu::parallel_for(n, grain, [&](int64_t b, int64_t end) {
          for (int64_t r = b; r < end; ++r) {
            if (tp[r] == ignore) {
              std::fill(o + r * c, o + (r + 1) * c, scalar_t(0));
              continue;
            }
            ce::volt_ce_row_grad(xp + r * c, c, tp[r], gp ? gp[r] : scale, e, o + r * c);
          }
        });
      }
    });
  }

  // Never destroyed: tensors held by static objects may die after the backend.
  LargeBlockCache& large_ = *new LargeBlockCache;

  static void where_kernel(const std::array<Operand, 3>& in, Tensor& out) {
    VOLT_DISPATCH_DTYPE(out.dtype(), [&] {
      Shape sh = out.sizes();
      int64_t n = out.numel(), nd = out.dim();
      scalar_t* o = static_cast<scalar_t*>(out.raw_data());
      const bool* c = reinterpret_cast<const bool*>(in[0].ptr);
      const scalar_t* a = reinterpret_cast<const scalar_t*>(in[1].ptr);
      const scalar_t* b = reinterpret_cast<const scalar_t*>(in[2].ptr);
      if (const int mask = scalar_mask(in, sh); mask >= 0 && n > 0) {
        // The condition read as bytes (a bool is 0 or 1): GCC vectorises a
        // select on a byte, not on a bool load, and the branchy scalar loop
        // mispredicts on every other element of a random mask (a ReLU's).
        const uint8_t* cb = reinterpret_cast<const uint8_t*>(c);
        with_mask<3>(mask, [&]<int M>() {
          flat_loop<M, scalar_t>(o, n, std::tuple{cb, a, b},
                                 [](uint8_t ci, scalar_t ai, scalar_t bi) { return ci ? ai : bi; });
        });
        return;
      }
      Shape idx(nd, 0);
      int64_t oc = 0, oa = 0, ob = 0;
      for (int64_t k = 0; k < n; ++k) {
        o[k] = c[oc] ? a[oa] : b[ob];
        for (int64_t d = nd - 1; d >= 0; --d) {
          if (++idx[d] < sh[d]) {
            oc += in[0].strides[d];
            oa += in[1].strides[d];
            ob += in[2].strides[d];
            break;
          }
          oc -= (sh[d] - 1) * in[0].strides[d];
          oa -= (sh[d] - 1) * in[1].strides[d];
          ob -= (sh[d] - 1) * in[2].strides[d];
          idx[d] = 0;
        }
      }
    });
  }
};

// Subnormal floats make arithmetic on x86 several times slower, and Adam's
// moments drift into that range during training: flush them to zero (documented
// default; VOLT_KEEP_DENORMALS=1 keeps IEEE behaviour).
void set_flush_denormals() {
  if (const char* e = std::getenv("VOLT_KEEP_DENORMALS"); e && e[0] == '1') return;
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

struct Registrar {
  Registrar() {
    static CpuBackend backend;
    register_backend(DeviceType::CPU, &backend);
    set_flush_denormals();
    // volt's pool (tensor/cpu_threads.cpp) runs each task with its caller's MXCSR.
  }
} g_registrar;

}  // namespace
}  // namespace volt
