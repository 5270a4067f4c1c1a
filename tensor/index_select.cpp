// index_select: the slices of a tensor at integer positions along one dim, as
// the rows an embedding picks from a table (so its gradient, the jit, the lazy
// device and compile_step are the embedding's).
#include <volt/tensor/ops.h>
#include <volt/tensor/shape.h>

namespace volt {

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  VOLT_CHECK(x.defined() && index.defined(), "index_select", "got an undefined tensor");
  VOLT_CHECK(x.dim() >= 1, "index_select", "expected a tensor of at least 1 dim, got a 0-dim tensor");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  VOLT_CHECK(d >= 0 && d < x.dim(), "index_select", "dim " << dim << " out of range for " << x.dim() << " dims");
  VOLT_CHECK(index.dim() == 1 && is_integral(index.dtype()) && index.dtype() != DType::b8, "index_select",
             "expected a 1-D integer index, got " << dtype_name(index.dtype()) << " " << shape_str(index.sizes()));
  Tensor moved = d == 0 ? x : x.transpose(0, d);
  const Shape rest(moved.sizes().begin() + 1, moved.sizes().end());
  const int64_t n = moved.sizes()[0], k = index.sizes()[0], width = shape_numel(rest);
  Tensor rows;  // (k, width)
  if (is_floating(x.dtype())) {
    rows = embedding(moved.reshape({n, width}), index);
  } else if (x.dtype() != DType::i64) {
    // bool, u8 and i32 values are exact in f64: picked as its rows, converted back.
    rows = convert_element_type(embedding(convert_element_type(moved.reshape({n, width}), DType::f64), index),
                                x.dtype());
  } else {
    // i64 past 2^53 is not exact in f64: each value as q 2^32 + r, both parts
    // exact in f64 (|q| < 2^31, |r| < 2^33), picked as rows and put together
    // again in i64.  q is the f64 value scaled by 2^-32 and truncated, the f64
    // value first kept below 2^63 so that q 2^32 does not overflow i64;
    // r = x - q 2^32 is computed in i64.
    const Tensor flat = moved.reshape({n, width});
    const Tensor scale = Tensor::full({}, 4294967296.0, DType::i64, x.device());
    const Tensor wide = minimum(convert_element_type(flat, DType::f64), 9223372036854774784.0);  // 2^63 - 2^10
    const Tensor q = convert_element_type(wide * (1.0 / 4294967296.0), DType::i64);
    const Tensor r = flat - q * scale;
    const Tensor q_rows = embedding(convert_element_type(q, DType::f64), index);
    const Tensor r_rows = embedding(convert_element_type(r, DType::f64), index);
    rows = convert_element_type(q_rows, DType::i64) * scale + convert_element_type(r_rows, DType::i64);
  }
  Shape out{k};
  out.insert(out.end(), rest.begin(), rest.end());
  Tensor r = rows.reshape(out);
  return d == 0 ? r : r.transpose(0, d);
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return volt::index_select(*this, dim, index); }

}  // namespace volt
