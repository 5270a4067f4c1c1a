// Naive references for the tensor tests: plain loops in double over row-major
// values, independent of the library's kernels (only from_vector/to_vector are
// used to move data in and out).  check_close prints the worst element.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <volt/tensor/ops.h>

#include "tests/compare.h"

namespace volt::testing {

// Whether two tensors (on any device) hold the same dtype, shape and bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.to(kCPU).contiguous(), cb = b.to(kCPU).contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// A bf16 or f16 tensor's 16-bit patterns, in row-major order.
inline std::vector<uint16_t> bits16(const Tensor& t) {
  Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.raw_data());
  return std::vector<uint16_t>(p, p + c.numel());
}


// PyTorch's relu, by its documented rule: max(0, x), and max propagates NaN
// (torch.maximum: "If one of the elements being compared is a NaN, then that
// element is returned"), so relu(NaN) is NaN.
template <class T>
inline T relu_ref(T v) {
  if (std::isnan(v)) return v;
  return v > T(0) ? v : T(0);
}

// Row-major values and their shape.
struct Ref {
  Shape sizes;
  std::vector<double> v;
};

inline Ref ref_of(const Tensor& t) { return {t.sizes(), t.to_vector<double>()}; }

inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + idx[d];
  return i;
}

inline Shape ref_broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The element of `r` that broadcasting places at `idx` of a larger shape.
inline double at_broadcast(const Ref& r, const std::vector<int64_t>& idx) {
  size_t lead = idx.size() - r.sizes.size();
  int64_t i = 0;
  for (size_t d = 0; d < r.sizes.size(); ++d)
    i = i * r.sizes[d] + (r.sizes[d] == 1 ? 0 : idx[lead + d]);
  return r.v[i];
}

inline Ref ref_map(const Ref& a, const std::function<double(double)>& f) {
  Ref r{a.sizes, a.v};
  for (double& x : r.v) x = f(x);
  return r;
}

inline Ref ref_zip(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Ref r{ref_broadcast(a.sizes, b.sizes), {}};
  int64_t n = shape_numel(r.sizes);
  for (int64_t i = 0; i < n; ++i) {
    auto idx = unravel(i, r.sizes);
    r.v.push_back(f(at_broadcast(a, idx), at_broadcast(b, idx)));
  }
  return r;
}

inline Ref ref_zip3(const Ref& a, const Ref& b, const Ref& c,
                    const std::function<double(double, double, double)>& f) {
  Ref r{ref_broadcast(ref_broadcast(a.sizes, b.sizes), c.sizes), {}};
  int64_t n = shape_numel(r.sizes);
  for (int64_t i = 0; i < n; ++i) {
    auto idx = unravel(i, r.sizes);
    r.v.push_back(f(at_broadcast(a, idx), at_broadcast(b, idx), at_broadcast(c, idx)));
  }
  return r;
}

// Folds the elements of each reduced group (in index order) with f.
inline Ref ref_reduce(const Ref& a, std::vector<int64_t> dims, bool keepdim,
                      const std::function<double(const std::vector<double>&)>& f) {
  const int64_t nd = static_cast<int64_t>(a.sizes.size());
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  for (int64_t& d : dims) d = d < 0 ? d + nd : d;
  auto reduced = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  Shape kept;  // output shape with keepdim
  for (int64_t d = 0; d < nd; ++d) kept.push_back(reduced(d) ? 1 : a.sizes[d]);
  std::vector<std::vector<double>> groups(static_cast<size_t>(shape_numel(kept)));
  for (int64_t i = 0; i < shape_numel(a.sizes); ++i) {
    auto idx = unravel(i, a.sizes);
    for (int64_t d = 0; d < nd; ++d)
      if (reduced(d)) idx[d] = 0;
    groups[ravel(idx, kept)].push_back(a.v[i]);
  }
  Ref r;
  for (int64_t d = 0; d < nd; ++d)
    if (keepdim || !reduced(d)) r.sizes.push_back(kept[d]);
  for (auto& g : groups) r.v.push_back(f(g));
  return r;
}

inline double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
inline double ref_mean(const std::vector<double>& g) { return ref_sum(g) / g.size(); }
inline double ref_var(const std::vector<double>& g) {
  double m = ref_mean(g), s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / (static_cast<double>(g.size()) - 1);
}
inline double ref_max(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
inline double ref_min(const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }
inline double ref_argmax(const std::vector<double>& g) {
  return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin());
}
inline double ref_argmin(const std::vector<double>& g) {
  return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin());
}

// (.., m, k) x (.., k, n) with broadcast batch dims; no 1-D promotion.
inline Ref ref_matmul(const Ref& a, const Ref& b) {
  int64_t m = a.sizes[a.sizes.size() - 2], k = a.sizes.back(), n = b.sizes.back();
  Shape ba(a.sizes.begin(), a.sizes.end() - 2), bb(b.sizes.begin(), b.sizes.end() - 2);
  Shape batch = ref_broadcast(ba, bb);
  Ref r{batch, {}};
  r.sizes.push_back(m);
  r.sizes.push_back(n);
  Ref a_mat{ba, {}}, b_mat{bb, {}};
  for (int64_t bi = 0; bi < shape_numel(batch); ++bi) {
    auto idx = unravel(bi, batch);
    // Index of the batch element in each operand.
    size_t la = idx.size() - ba.size(), lb = idx.size() - bb.size();
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < ba.size(); ++d) ia = ia * ba[d] + (ba[d] == 1 ? 0 : idx[la + d]);
    for (size_t d = 0; d < bb.size(); ++d) ib = ib * bb[d] + (bb[d] == 1 ? 0 : idx[lb + d]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a.v[(ia * m + i) * k + p] * b.v[(ib * k + p) * n + j];
        r.v.push_back(s);
      }
  }
  return r;
}

// Rounds a double to what the dtype stores (integers wrap as C++ conversions do).
inline double to_dtype(DType dt, double x) {
  if (std::isnan(x) || std::isinf(x)) return is_floating(dt) ? x : 0;
  switch (dt) {
    case DType::b8: return x != 0 ? 1 : 0;
    case DType::u8: return static_cast<uint8_t>(static_cast<int64_t>(x));
    case DType::i32: return static_cast<int32_t>(static_cast<int64_t>(x));
    case DType::i64: return static_cast<double>(static_cast<int64_t>(x));
    case DType::f32: return static_cast<float>(x);
    case DType::f64: return x;
    case DType::bf16: return BF16::from_float(static_cast<float>(x)).to_float();
    case DType::f16: return F16::from_float(static_cast<float>(x)).to_float();
  }
  return x;
}

inline Ref ref_cast(const Ref& a, DType dt) {
  return ref_map(a, [dt](double x) { return to_dtype(dt, x); });
}

// Deterministic values for a dtype: floats in [-2, 2] (not integers), ints in
// [-4, 5], u8 in [0, 9], alternating-ish bools.  `positive` keeps them > 0.
inline std::vector<double> sample_values(int64_t n, DType dt, uint32_t seed, bool positive = false) {
  std::vector<double> v;
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    double u = static_cast<double>(s >> 8) / 16777216.0;  // [0, 1)
    double x;
    if (is_floating(dt)) {
      x = positive ? 0.25 + 1.75 * u : -2.0 + 4.0 * u;
      x = static_cast<float>(x);
    } else if (dt == DType::b8) {
      x = u < 0.5 ? 0 : 1;
      if (positive) x = 1;
    } else if (dt == DType::u8 || positive) {
      x = 1 + std::floor(u * 9);
    } else {
      x = -4 + std::floor(u * 10);
    }
    v.push_back(x);
  }
  return v;
}

inline Tensor make(const std::vector<double>& v, const Shape& s, DType dt) {
  return VOLT_DISPATCH_DTYPE(dt, [&] {
    std::vector<scalar_t> tv;
    for (double x : v) tv.push_back(static_cast<scalar_t>(x));
    return Tensor::from_vector<scalar_t>(tv, s);
  });
}

inline Tensor sample(const Shape& s, DType dt, uint32_t seed, bool positive = false) {
  return make(sample_values(shape_numel(s), dt, seed, positive), s, dt);
}

// The same values as `t` in a non-contiguous layout: every element two apart.
inline Tensor strided(const Tensor& t) {
  Shape big = t.sizes();
  big.push_back(2);
  Tensor base = Tensor::zeros(big, t.dtype());
  Tensor v = base.select(-1, 0);
  v.copy_(t);
  return v;
}

// The same values as a 2-D `t`, stored transposed.
inline Tensor transposed_layout(const Tensor& t) { return t.t().contiguous().t(); }

inline bool same_value(double a, double b, double atol, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

// Shape and values of `got` against a reference; reports the worst element.
inline void check_close(const std::string& label, const Tensor& got, const Ref& want,
                        double atol = 1e-6, double rtol = 1e-5) {
  INFO(label);
  REQUIRE(got.defined());
  CHECK_MESSAGE(got.sizes() == want.sizes,
                "shape " << shape_str(got.sizes()) << " vs expected " << shape_str(want.sizes));
  if (got.sizes() != want.sizes) return;
  std::vector<double> g = got.to_vector<double>();
  int64_t worst = -1;
  double worst_err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (same_value(g[i], want.v[i], atol, rtol)) continue;
    double err = std::isfinite(g[i] - want.v[i]) ? std::fabs(g[i] - want.v[i]) : INFINITY;
    if (worst < 0 || err > worst_err) {
      worst = static_cast<int64_t>(i);
      worst_err = err;
    }
  }
  std::ostringstream msg;
  if (worst >= 0)
    msg << "worst element " << worst << " " << shape_str(unravel(worst, want.sizes)) << ": got "
        << g[worst] << ", expected " << want.v[worst];
  CHECK_MESSAGE(worst < 0, msg.str());
}

inline void check_close(const std::string& label, const Tensor& got, const Tensor& want,
                        double atol = 1e-6, double rtol = 1e-5) {
  check_close(label, got, ref_of(want), atol, rtol);
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d{DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::b8};
  return d;
}

}  // namespace volt::testing
