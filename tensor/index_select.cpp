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
  VOLT_CHECK(is_floating(x.dtype()), "index_select",
             "selects from floating tensors (f32, f64, f16, bf16), got " << dtype_name(x.dtype())
                                                                          << "; convert it first");
  Tensor moved = d == 0 ? x : x.transpose(0, d);
  const Shape rest(moved.sizes().begin() + 1, moved.sizes().end());
  const int64_t n = moved.sizes()[0];
  Tensor rows = embedding(moved.reshape({n, shape_numel(rest)}), index);  // (k, prod(rest))
  Shape out{index.sizes()[0]};
  out.insert(out.end(), rest.begin(), rest.end());
  Tensor r = rows.reshape(out);
  return d == 0 ? r : r.transpose(0, d);
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return volt::index_select(*this, dim, index); }

}  // namespace volt
