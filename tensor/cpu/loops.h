// The CPU backend's loops over any strides: flat, threaded and vectorised when
// every operand is plain or one broadcast element, a row walk otherwise.  Used
// by the kernels of tensor/cpu/ (elementwise, copy and where, the backend's copy).
#pragma once
#include <algorithm>
#include <array>
#include <tuple>
#include <vector>

#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/tensor.h>

namespace volt::cpu {

// Elements (or Philox draws) a loop needs before it splits over threads.
inline constexpr int64_t kParallelGrain = int64_t(1) << 15;

// ---------------------------------------------------------------- strided walk
// An operand of an elementwise loop: a base pointer and element strides already
// broadcast to the output shape (0 along broadcast dims).
struct Operand {
  const char* ptr;
  Shape strides;
  size_t esize;
};

inline Operand operand_of(const Tensor& t, const Shape& out_shape) {
  Operand o{static_cast<const char*>(t.raw_data()), Shape(out_shape.size(), 0), dtype_size(t.dtype())};
  size_t lead = out_shape.size() - t.sizes().size();
  for (size_t i = 0; i < t.sizes().size(); ++i)
    o.strides[lead + i] = t.sizes()[i] == 1 ? 0 : t.strides()[i];
  return o;
}

inline bool is_plain(const Operand& o, const Shape& shape) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (o.strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

inline bool is_scalar(const Operand& o) {
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
  parallel_for(n, kParallelGrain, [&](int64_t i0, int64_t i1) {
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
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
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

inline Prepared prepare(const OpCall& call, size_t first, DType c, const Shape& out_shape) {
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


}  // namespace volt::cpu
