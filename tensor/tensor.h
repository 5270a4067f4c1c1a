// volt::Tensor — a handle to shared storage plus shape, strides and offset.
//
//   auto a = volt::Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
//   auto b = a.t() * 2.0;          // a view, then a new tensor
//   std::cout << b.sum({0});       // tensor([ 6., 14.])
//   b.select(0, 1).fill_(0);       // views write through to their base
//
// Every op goes through one dispatch point (tensor/dispatch.h): eager mode runs
// it on the tensor's device, the jit's tracer and the lazy device record it.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <volt/tensor/device.h>
#include <volt/tensor/dtype.h>
#include <volt/tensor/error.h>
#include <volt/tensor/scalar.h>
#include <volt/tensor/shape.h>
#include <volt/tensor/storage.h>

namespace volt {

namespace autograd {
struct Node;  // defined in autograd/; a tensor only holds a pointer to its grad_fn
}
namespace indexing {
class TensorIndex;  // tensor/indexing.h
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null for a proxy (a traced value with no data)
  Shape sizes, strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  Device device;
  bool is_view = false;  // made by a view op: its storage is another tensor's too

  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  int output_nr = 0;

  // Set by a tracer (jit, lazy mode): which traced value this tensor stands for.
  int64_t proxy_id = -1;
  const void* proxy_owner = nullptr;
  // Extra per-backend state (the lazy device keeps its graph node here).
  std::shared_ptr<void> backend_state;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (dtype f32 and the CPU unless told) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32, Device device = kCPU);
  static Tensor arange(double end, DType dtype = DType::i64, Device device = kCPU);
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64,
                       Device device = kCPU);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = kCPU);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector<T>(values, {static_cast<int64_t>(values.size())});
  }
  static Tensor scalar_tensor(Scalar v, DType dtype, Device device = kCPU);
  // Random numbers from the global Philox generator (tensor/random.h).
  static Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64,
                        Device device = kCPU);
  // A tensor with metadata and no data: what tracers hand to ops.
  static Tensor proxy(const Shape& shape, DType dtype, Device device);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  const Shape& sizes() const { return ref().sizes; }
  const Shape& strides() const { return ref().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const { return shape_numel(sizes()); }
  int64_t storage_offset() const { return ref().offset; }
  DType dtype() const { return ref().dtype; }
  Device device() const { return ref().device; }
  bool is_contiguous() const;
  bool is_proxy() const { return impl_ && !impl_->storage; }
  bool has_data() const { return impl_ && impl_->storage != nullptr; }
  std::string meta_str() const;  // "cpu f32[8, 784]"

  // Raw element pointer (CPU, or device memory for CUDA); checks the dtype.
  template <class T>
  T* data_ptr() const;
  void* raw_data() const;  // start of this view's first element

  // ---- values (synchronise; under a tracer they record a guard) ----
  template <class T>
  T item() const;
  double item_double() const;
  template <class T>
  std::vector<T> to_vector() const;
  explicit operator bool() const;

  // ---- views: share storage ----
  Tensor view(const Shape& shape) const;     // errors if the strides cannot express it (PyTorch's rule)
  Tensor reshape(const Shape& shape) const;  // view if possible, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // [start, end), step 1
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- indexing with a list: t.index({Slice(0, 2), 1}) (tensor/indexing.h) ----
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;  // volt::index_select (tensor/ops.h)
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, Scalar value);

  // ---- in place ----
  // As in PyTorch: each write bumps the storage's version (version()), so
  // backward through a tensor saved before the write is an error; with grad
  // mode on, a write to a tensor in an autograd graph (or of a value that
  // requires grad) is recorded, the tensor taking the write's history.  Refused:
  // a leaf that requires grad, a view of a recorded tensor (clone() it first),
  // and a destination whose elements overlap (an expanded view).  A value that
  // needs no grad written over a recorded tensor cuts it from the graph.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(Scalar v);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, Scalar alpha = 1.0);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);

  // ---- common ops as methods (free functions in tensor/ops.h) ----
  // dims as LibTorch takes them: t.sum(), t.sum(1), t.sum({0, 2}, true)
  Tensor sum(const Dims& dims = {}, bool keepdim = false) const;
  Tensor mean(const Dims& dims = {}, bool keepdim = false) const;
  Tensor amax(const Dims& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;  // the flat index of the largest element, () i64
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;
  // The method forms of tensor/ops.h's ops of the same names.
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor max() const;  // () the largest element
  Tensor min() const;
  // Comparisons (bool results) and elementwise math, as LibTorch's methods.
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor sqrt() const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool equal(const Tensor& other) const;

  // ---- autograd (implemented in autograd/) ----
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Tensor& requires_grad_(bool on = true);
  Tensor grad() const { return impl_ && impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void set_grad(const Tensor& g) { ref().grad = g.impl_; }
  bool is_leaf() const { return !impl_ || !impl_->grad_fn; }
  Tensor detach() const;  // shares storage, no grad_fn, requires_grad false
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // The storage's write count (0 for a tensor without data); mark_modified()
  // bumps it for code that writes through data_ptr() rather than copy_().
  uint64_t version() const { return has_data() ? impl_->storage->version : 0; }
  void mark_modified() const {
    if (has_data()) ++impl_->storage->version;
  }

 private:
  Tensor& assign_(const Tensor& value, const char* op);
  TensorImpl& ref() const {
    if (!impl_) throw Error("Tensor: use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);
// How printing names a grad_fn ("sum_backward"): autograd/ installs it, as tensor/
// only knows the node by a forward declaration.
using GradFnNamer = std::string (*)(const autograd::Node& node);
void set_grad_fn_namer(GradFnNamer fn);
GradFnNamer grad_fn_namer();

// Makes a tensor from an existing implementation's metadata with fresh storage.
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset,
                   DType dtype, Device device);

// ---- template definitions ----
template <class T>
T* Tensor::data_ptr() const {
  VOLT_CHECK(dtype() == dtype_of<T>::value, "data_ptr",
             "tensor has dtype " << dtype_name(dtype()) << ", asked for "
                                 << dtype_name(dtype_of<T>::value));
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  VOLT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector",
             values.size() << " values cannot fill shape " << shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value, kCPU);
  T* p = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return device.is_cpu() ? t : t.to(device);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(kCPU).to(dtype_of<T>::value).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <class T>
T Tensor::item() const {
  // A double holds 53 bits: read 64-bit integers directly.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (has_data() && device().is_cpu() && dtype() == DType::i64 && numel() == 1)
      return static_cast<T>(*static_cast<const int64_t*>(raw_data()));
  }
  return static_cast<T>(item_double());
}

}  // namespace volt
