// t.index({...}) and t.index_put_({...}, v): views for integers, slices, None and
// Ellipsis; a boolean mask over the leading dims read as a copy, written with where.
#include <volt/tensor/indexing.h>

#include <algorithm>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>

namespace volt {
namespace {

using indexing::EllipsisT;
using indexing::NoneT;
using indexing::Slice;
using indexing::TensorIndex;

bool is_mask(const TensorIndex& i) { return std::holds_alternative<Tensor>(i.value()); }

// How many dims of the tensor an index consumes (None adds one, Ellipsis is counted apart).
int64_t dims_used(const TensorIndex& i) {
  if (std::holds_alternative<NoneT>(i.value()) || std::holds_alternative<EllipsisT>(i.value())) return 0;
  if (is_mask(i)) return std::get<Tensor>(i.value()).dim();
  return 1;
}

// Python's slice bounds for a dim of size n: [start, stop) clamped into [0, n].
std::pair<int64_t, int64_t> slice_bounds(const Slice& s, int64_t n) {
  auto wrap = [n](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp<int64_t>(x, 0, n);
  };
  int64_t start = wrap(s.start, 0), stop = wrap(s.stop, n);
  return {start, std::max(start, stop)};
}

// The view that integers, slices, None and Ellipsis select.
Tensor view_of(const Tensor& t, const std::vector<TensorIndex>& indices) {
  int64_t used = 0, ellipses = 0;
  for (const auto& i : indices) {
    used += dims_used(i);
    ellipses += std::holds_alternative<EllipsisT>(i.value());
  }
  VOLT_CHECK(ellipses <= 1, "index", "at most one Ellipsis, got " << ellipses);
  VOLT_CHECK(used <= t.dim(), "index", "too many indices for a tensor of shape " << shape_str(t.sizes()) << ": "
                                           << used << " dims indexed, the tensor has " << t.dim());
  Tensor v = t;
  int64_t d = 0;  // the dim of v the next index applies to
  for (const auto& i : indices) {
    const auto& x = i.value();
    if (std::holds_alternative<int64_t>(x)) {
      v = v.select(d, std::get<int64_t>(x));  // select checks the range and names itself
    } else if (std::holds_alternative<Slice>(x)) {
      const Slice& s = std::get<Slice>(x);
      VOLT_CHECK(s.step == 1, "index", "Slice step must be 1 (views with other steps are not supported), got "
                                           << s.step);
      auto [start, stop] = slice_bounds(s, v.size(d));
      v = v.narrow(d, start, stop - start);
      ++d;
    } else if (std::holds_alternative<NoneT>(x)) {
      v = v.unsqueeze(d);
      ++d;
    } else if (std::holds_alternative<EllipsisT>(x)) {
      d += t.dim() - used;
    } else {
      throw Error("index: a boolean mask must be the only index (got it among " +
                  std::to_string(indices.size()) + " indices)");
    }
  }
  return v;
}

// The mask, checked: boolean, on t's device, shaped as t's leading dims.
const Tensor& checked_mask(const Tensor& t, const std::vector<TensorIndex>& indices, const char* op) {
  VOLT_CHECK(indices.size() == 1, op, "a boolean mask must be the only index (got " << indices.size() << ")");
  const Tensor& mask = std::get<Tensor>(indices[0].value());
  VOLT_CHECK(mask.dtype() == DType::b8, op,
             "a tensor index must be a boolean mask (b8), got " << dtype_name(mask.dtype())
                                                               << " (integer index tensors are not supported)");
  VOLT_CHECK(mask.device() == t.device(), op, "the mask is on " << mask.device().str() << ", the tensor on "
                                                                 << t.device().str());
  VOLT_CHECK(mask.dim() <= t.dim() && std::equal(mask.sizes().begin(), mask.sizes().end(), t.sizes().begin()), op,
             "the mask's shape " << shape_str(mask.sizes()) << " must equal the leading dims of the tensor's "
                                 << shape_str(t.sizes()));
  return mask;
}

// The mask reshaped to broadcast over the trailing dims it does not cover.
Tensor broadcastable(const Tensor& mask, const Tensor& t) {
  Shape s = mask.sizes();
  s.resize(t.dim(), 1);
  return mask.reshape(s);
}

}  // namespace

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const {
  if (indices.empty() || !std::any_of(indices.begin(), indices.end(), is_mask)) return view_of(*this, indices);
  // A single 1-D integer tensor picks rows, as LibTorch's t.index({idx}).
  if (indices.size() == 1) {
    const Tensor& picked = std::get<Tensor>(indices[0].value());
    if (picked.defined() && picked.dim() == 1 && is_integral(picked.dtype()) && picked.dtype() != DType::b8)
      return volt::index_select(*this, 0, picked);
  }
  const Tensor& mask = checked_mask(*this, indices, "index");
  VOLT_CHECK(!(requires_grad() && grad_enabled()), "index",
             "reading through a boolean mask is not differentiable here; use where(mask, t, 0) instead");
  // Rows of the flattened leading dims where the mask holds, copied in order.
  int64_t k = mask.dim();
  Shape rest(sizes().begin() + k, sizes().end());
  Shape rows_shape{shape_numel(Shape(sizes().begin(), sizes().begin() + k))};
  rows_shape.insert(rows_shape.end(), rest.begin(), rest.end());
  Tensor rows = reshape(rows_shape);
  std::vector<uint8_t> keep = mask.contiguous().to(kCPU).to(DType::u8).to_vector<uint8_t>();
  int64_t count = std::count_if(keep.begin(), keep.end(), [](uint8_t b) { return b != 0; });
  Shape out_shape{count};
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  Tensor out = Tensor::empty(out_shape, dtype(), device());
  int64_t j = 0;
  for (int64_t r = 0; r < static_cast<int64_t>(keep.size()); ++r) {
    if (keep[r]) out.select(0, j++).copy_(rows.select(0, r));
  }
  return out;
}

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value) {
  if (indices.empty() || !std::any_of(indices.begin(), indices.end(), is_mask)) {
    Tensor v = view_of(*this, indices);
    v.copy_(value.expand(v.sizes()));
    return *this;
  }
  const Tensor& mask = checked_mask(*this, indices, "index_put_");
  copy_(where(broadcastable(mask, *this), value, *this));
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, Scalar value) {
  if (indices.empty() || !std::any_of(indices.begin(), indices.end(), is_mask)) {
    view_of(*this, indices).fill_(value);
    return *this;
  }
  const Tensor& mask = checked_mask(*this, indices, "index_put_");
  copy_(where(broadcastable(mask, *this), Value(value), *this));
  return *this;
}

}  // namespace volt
