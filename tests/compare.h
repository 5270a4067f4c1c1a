// How far a result is from its reference, for every test that compares
// numbers.  A NaN (or an infinity) where the reference has none is never
// "close": it is an infinite error, so a check such as `< 1e-5` fails on it.
// A NaN where the reference has a NaN, or the same infinity, is no error.
// Tensors must have the same shape, not only the same number of elements.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::testing {

// |got - want|, with NaN and infinities as above.
inline double abs_error(double got, double want) {
  if (std::isnan(got) || std::isnan(want))
    return std::isnan(got) && std::isnan(want) ? 0.0 : std::numeric_limits<double>::infinity();
  if (got == want) return 0.0;  // the same infinity too
  return std::fabs(got - want);
}

// |got - want| / (|want| + floor).
inline double rel_error(double got, double want, double floor) {
  const double e = abs_error(got, want);
  return e == 0.0 || std::isinf(e) ? e : e / (std::fabs(want) + floor);
}

// The larger of two errors, where a NaN error is the largest of all (std::max
// would drop it: std::max(0.0, NaN) is 0).
inline double worse(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::infinity();
  return a > b ? a : b;
}

template <class A, class B>
double max_abs_diff(const std::vector<A>& got, const std::vector<B>& want) {
  if (got.size() != want.size()) {
    MESSAGE("max_abs_diff: " << got.size() << " values against " << want.size());
    return std::numeric_limits<double>::infinity();
  }
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) w = worse(w, abs_error(double(got[i]), double(want[i])));
  return w;
}

template <class A, class B>
double max_rel_diff(const std::vector<A>& got, const std::vector<B>& want, double floor) {
  if (got.size() != want.size()) {
    MESSAGE("max_rel_diff: " << got.size() << " values against " << want.size());
    return std::numeric_limits<double>::infinity();
  }
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) w = worse(w, rel_error(double(got[i]), double(want[i]), floor));
  return w;
}

inline bool same_shape(const Tensor& got, const Tensor& want, const char* what) {
  if (got.sizes() == want.sizes()) return true;
  std::string g, w;
  for (int64_t s : got.sizes()) g += std::to_string(s) + " ";
  for (int64_t s : want.sizes()) w += std::to_string(s) + " ";
  MESSAGE(what << ": shape [ " << g << "] against [ " << w << "]");
  return false;
}

// The largest error over all elements of two tensors of one shape (infinite
// when the shapes differ).
inline double max_abs_diff(const Tensor& got, const Tensor& want) {
  if (!same_shape(got, want, "max_abs_diff")) return std::numeric_limits<double>::infinity();
  return max_abs_diff(got.to_vector<double>(), want.to_vector<double>());
}

inline double max_rel_diff(const Tensor& got, const Tensor& want, double floor = 1e-6) {
  if (!same_shape(got, want, "max_rel_diff")) return std::numeric_limits<double>::infinity();
  return max_rel_diff(got.to_vector<double>(), want.to_vector<double>(), floor);
}

}  // namespace volt::testing
