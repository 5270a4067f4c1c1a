// Printing in PyTorch's style:  tensor([[1.0000, 2.5000],
//                                       [3.0000, 4.0000]], dtype=f64)
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "tensor/tensor.h"

namespace volt {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  enum class Mode { Int, Bool, FloatInt, Fixed, Sci } mode = Mode::Int;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    switch (mode) {
      case Mode::Bool: return v != 0 ? "True" : "False";
      case Mode::Int: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
      case Mode::FloatInt:
        if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.0f.", v);
        else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        break;
      case Mode::Fixed:
        if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.4f", v);
        else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        break;
      case Mode::Sci:
        if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.4e", v);
        else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        break;
    }
    return buf;
  }
  std::string padded(double v) const {
    std::string s = format(v);
    return std::string(width > static_cast<int>(s.size()) ? width - s.size() : 0, ' ') + s;
  }
};

// Indices shown along one dim: all, or the first and last few with a gap.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> r;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i) r.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) r.push_back(i);
    r.push_back(-1);  // the "..." marker
    for (int64_t i = n - kEdgeItems; i < n; ++i) r.push_back(i);
  }
  return r;
}

void collect(const Tensor& t, const std::vector<double>& vals, const Shape& strides, int64_t dim,
             int64_t off, bool summarize, std::vector<double>& out) {
  if (dim == t.dim()) {
    out.push_back(vals[off]);
    return;
  }
  for (int64_t i : shown(t.sizes()[dim], summarize))
    if (i >= 0) collect(t, vals, strides, dim + 1, off + i * strides[dim], summarize, out);
}

void emit(std::ostream& os, const Tensor& t, const std::vector<double>& vals, const Shape& strides,
          int64_t dim, int64_t off, bool summarize, const Formatter& f, int indent) {
  if (dim == t.dim()) {
    os << f.padded(vals[off]);
    return;
  }
  os << "[";
  auto idx = shown(t.sizes()[dim], summarize);
  bool last_dim = dim == t.dim() - 1;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      os << ",";
      if (last_dim) os << " ";
      else os << std::string(static_cast<size_t>(t.dim() - dim - 1), '\n') << std::string(indent + 1, ' ');
    }
    if (idx[k] < 0) os << "...";
    else emit(os, t, vals, strides, dim + 1, off + idx[k] * strides[dim], summarize, f, indent + 1);
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t0) {
  if (!t0.defined()) return os << "tensor(undefined)";
  if (!t0.has_data()) return os << "tensor(<traced " << t0.meta_str() << ">)";
  Tensor t = t0.to(kCPU).contiguous();
  std::vector<double> vals = t.to_vector<double>();
  bool summarize = t.numel() > kSummarizeAbove;
  std::vector<double> visible;
  collect(t, vals, t.strides(), 0, 0, summarize, visible);

  Formatter f;
  if (t.dtype() == DType::b8) {
    f.mode = Formatter::Mode::Bool;
  } else if (is_floating(t.dtype())) {
    bool all_int = true;
    double amax = 0, amin_nz = INFINITY;
    for (double v : visible) {
      if (!std::isfinite(v)) continue;
      all_int &= v == std::floor(v);
      amax = std::max(amax, std::fabs(v));
      if (v != 0) amin_nz = std::min(amin_nz, std::fabs(v));
    }
    if (all_int && amax < 1e8) f.mode = Formatter::Mode::FloatInt;
    else if (amax >= 1e8 || (amin_nz < 1e-4) || (amin_nz != INFINITY && amax / amin_nz > 1000))
      f.mode = Formatter::Mode::Sci;
    else f.mode = Formatter::Mode::Fixed;
  }
  for (double v : visible) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));

  std::ostringstream body;
  const int indent = 7;  // strlen("tensor(")
  if (t.dim() == 0) body << f.format(vals[0]);
  else if (t.numel() == 0) body << "[]";
  else emit(body, t, vals, t.strides(), 0, 0, summarize, f, indent);
  os << "tensor(" << body.str();
  if (t.numel() == 0 && t.dim() != 1) os << ", size=" << shape_str(t.sizes());
  if (!t0.device().is_cpu()) os << ", device='" << t0.device().str() << "'";
  if (t.dtype() != DType::f32 && t.dtype() != DType::i64 && t.dtype() != DType::b8)
    os << ", dtype=" << dtype_name(t.dtype());
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace volt
