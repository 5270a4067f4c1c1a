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
  } else {
    // Integers and bools, exactly: each picked row number (range-checked as an
    // embedding's index) selects its row by where, summed over the n rows.
    // Memory k * n * width: meant for labels and masks, not large tables.
    Tensor numbers = Tensor::arange(static_cast<double>(n), DType::f64, x.device());
    Tensor picked = embedding(numbers.reshape({n, 1}), index).reshape({k, 1, 1});
    Tensor hit = eq(picked, numbers.reshape({1, n, 1}));
    Tensor zero = Tensor::zeros({}, x.dtype(), x.device());
    rows = convert_element_type(sum(where(hit, moved.reshape({1, n, width}), zero), {1}), x.dtype());
  }
  Shape out{k};
  out.insert(out.end(), rest.begin(), rest.end());
  Tensor r = rows.reshape(out);
  return d == 0 ? r : r.transpose(0, d);
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return volt::index_select(*this, dim, index); }

}  // namespace volt
