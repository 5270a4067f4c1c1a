// Printing in PyTorch's style:  tensor([[1.0000, 2.5000],
//                                       [3.0000, 4.0000]], dtype=f64)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include <volt/tensor/tensor.h>

namespace volt {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

constexpr int kLineWidth = 80;

struct Formatter {
  enum class Mode { Int, Bool, FloatInt, Fixed, Sci } mode = Mode::Int;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (mode == Mode::Bool) return v != 0 ? "True" : "False";
    if (mode == Mode::Int) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      return buf;
    }
    if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
    if (mode == Mode::FloatInt) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else if (mode == Mode::Fixed) std::snprintf(buf, sizeof buf, "%.4f", v);
    else std::snprintf(buf, sizeof buf, "%.4e", v);
    return buf;
  }
  std::string padded(double v) const {
    std::string s = format(v);
    return std::string(width > static_cast<int>(s.size()) ? width - s.size() : 0, ' ') + s;
  }
};

// PyTorch's _Formatter: for floats the mode and the width come from the finite
// nonzero values only (so nan, inf and 0 never widen a column).
Formatter make_formatter(DType dtype, const std::vector<double>& visible) {
  Formatter f;
  if (!is_floating(dtype)) {
    f.mode = dtype == DType::b8 ? Formatter::Mode::Bool : Formatter::Mode::Int;
    for (double v : visible) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
    return f;
  }
  f.mode = Formatter::Mode::FloatInt;
  std::vector<double> nz;
  for (double v : visible)
    if (std::isfinite(v) && v != 0) nz.push_back(v);
  if (nz.empty()) return f;
  bool all_int = true;
  double amax = 0, amin = INFINITY;
  for (double v : nz) {
    all_int &= v == std::ceil(v);
    amax = std::max(amax, std::fabs(v));
    amin = std::min(amin, std::fabs(v));
  }
  bool wide = amax / amin > 1000 || amax > 1e8;
  if (all_int) f.mode = wide ? Formatter::Mode::Sci : Formatter::Mode::FloatInt;
  else f.mode = wide || amin < 1e-4 ? Formatter::Mode::Sci : Formatter::Mode::Fixed;
  for (double v : nz) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
  return f;
}

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

// PyTorch's _tensor_str_with_formatter: rows of the last dim wrap at 80 columns;
// outer dims are separated by dim - 1 newlines and aligned under the first "[".
std::string emit(const Tensor& t, const std::vector<double>& vals, const Shape& strides, int64_t dim,
                 int64_t off, bool summarize, const Formatter& f, int indent) {
  auto idx = shown(t.sizes()[dim], summarize);
  std::string r = "[";
  if (dim == t.dim() - 1) {
    const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (f.width + 2));
    std::string wrap = ",\n";
    wrap.append(static_cast<size_t>(indent + 1), ' ');
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) r += static_cast<int64_t>(k) % per_line == 0 ? wrap : std::string(", ");
      r += idx[k] < 0 ? " ..." : f.padded(vals[off + idx[k] * strides[dim]]);
    }
    return r + "]";
  }
  std::string sep = ",";
  sep.append(static_cast<size_t>(t.dim() - dim - 1), '\n');
  sep.append(static_cast<size_t>(indent + 1), ' ');
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) r += sep;
    r += idx[k] < 0 ? "..." : emit(t, vals, strides, dim + 1, off + idx[k] * strides[dim], summarize, f, indent + 1);
  }
  return r + "]";
}

}  // namespace

namespace {
GradFnNamer& namer_slot() {
  static GradFnNamer namer = nullptr;
  return namer;
}
}  // namespace

void set_grad_fn_namer(GradFnNamer fn) { namer_slot() = fn; }
GradFnNamer grad_fn_namer() { return namer_slot(); }

std::ostream& operator<<(std::ostream& os, const Tensor& t0) {
  if (!t0.defined()) return os << "tensor(undefined)";
  // A lazy tensor has no data yet: to(kCPU) below runs its pending graph.
  if (!t0.has_data() && !t0.device().is_lazy()) return os << "tensor(<traced " << t0.meta_str() << ">)";
  Tensor t = t0.to(kCPU).contiguous();
  std::vector<double> vals = t.to_vector<double>();
  bool summarize = t.numel() > kSummarizeAbove;
  std::vector<double> visible;
  if (t.numel() > 0) collect(t, vals, t.strides(), 0, 0, summarize, visible);
  Formatter f = make_formatter(t.dtype(), visible);

  const int indent = 7;  // strlen("tensor(")
  std::string body = "tensor(";
  std::vector<std::string> suffixes;
  if (!t0.device().is_cpu()) suffixes.push_back("device='" + t0.device().str() + "'");
  if (t.numel() == 0) {
    body += "[]";
    if (t.dim() != 1) {
      std::string size = "(";
      for (int64_t i = 0; i < t.dim(); ++i) size += (i ? ", " : "") + std::to_string(t.sizes()[i]);
      suffixes.push_back("size=" + size + ")");
    }
    // Nothing shows whether an empty tensor holds integers: name every non-default dtype.
    if (t.dtype() != DType::f32) suffixes.push_back(std::string("dtype=") + dtype_name(t.dtype()));
  } else {
    body += t.dim() == 0 ? f.format(vals[0]) : emit(t, vals, t.strides(), 0, 0, summarize, f, indent);
    if (t.dtype() != DType::f32 && t.dtype() != DType::i64 && t.dtype() != DType::b8)
      suffixes.push_back(std::string("dtype=") + dtype_name(t.dtype()));
  }
  // As PyTorch: the node that made the tensor, else whether it is a leaf that wants a gradient.
  GradFnNamer namer = grad_fn_namer();
  if (t0.impl()->grad_fn && namer) {
    suffixes.push_back("grad_fn=<" + namer(*t0.impl()->grad_fn) + ">");
  } else if (t0.requires_grad()) {
    suffixes.push_back("requires_grad=True");
  }
  // A suffix that would pass the line width goes on a line of its own (_add_suffixes).
  int64_t last_line = static_cast<int64_t>(body.size()) -
                      static_cast<int64_t>(body.rfind('\n') == std::string::npos ? -1 : body.rfind('\n')) + 1;
  for (const std::string& s : suffixes) {
    int64_t len = static_cast<int64_t>(s.size());
    if (last_line + len + 2 > kLineWidth) {
      body += ",\n" + std::string(indent, ' ') + s;
      last_line = indent + len;
    } else {
      body += ", " + s;
      last_line += len + 2;
    }
  }
  return os << body << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace volt
