#include <volt/tensor/shape.h>

#include <volt/tensor/error.h>

#include <ostream>

namespace volt {

int64_t checked_mul(int64_t a, int64_t b, const Shape& s, const char* op) {
  int64_t r = 0;
  VOLT_CHECK(!__builtin_mul_overflow(a, b, &r), op,
             "shape " << shape_str(s) << " has more elements than a 64-bit count can hold");
  return r;
}

int64_t shape_numel(const Shape& s, const char* op) {
  int64_t n = 1;
  for (int64_t d : s) n = checked_mul(n, d, s, op);
  return n;
}

Shape contiguous_strides(const Shape& s, const char* op) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc = checked_mul(acc, s[i] > 0 ? s[i] : 1, s, op);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    VOLT_CHECK(da == db || da == 1 || db == 1, op,
               "shapes " << shape_str(a) << " and " << shape_str(b) << " cannot be broadcast (dim "
                         << i << ": " << da << " vs " << db << ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  VOLT_CHECK(dim >= lo && dim <= hi, op,
             "dim " << dim << " out of range for a tensor of " << ndim << " dims (expected "
                    << lo << ".." << hi << ")");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

}  // namespace volt
