// Tensors made from outside data: nested initializer lists, external memory
// (from_blob) and random permutations drawn from volt's generator.
#include <algorithm>
#include <numeric>

#include <volt/tensor/factories.h>
#include <volt/tensor/random.h>
#include <volt/tensor/storage.h>

namespace volt {

namespace {

// Checks every level against the shape the first items gave; names the
// first ragged level.
void check_nested(const NestedList& l, size_t depth, const Shape& shape, bool& floating) {
  if (l.is_leaf()) {
    VOLT_CHECK(depth == shape.size(), "tensor",
               "ragged nested list: a number at depth " << depth << " where the list of shape "
                                                        << shape_str(shape) << " needs " << shape.size());
    floating |= l.floating();
    return;
  }
  const int64_t n = static_cast<int64_t>(l.items().size());
  VOLT_CHECK(depth < shape.size() && shape[depth] == n, "tensor",
             "ragged nested list: a list of " << n << " items at depth " << depth << " where the shape "
                                             << shape_str(shape) << " was expected");
  for (const NestedList& c : l.items()) check_nested(c, depth + 1, shape, floating);
}

void nested_values(const NestedList& l, std::vector<double>& out) {
  if (l.is_leaf()) {
    out.push_back(l.value());
    return;
  }
  for (const NestedList& c : l.items()) nested_values(c, out);
}

}  // namespace

Tensor tensor(const NestedList& values, std::optional<DType> dtype) {
  Shape shape;
  bool floating = false;
  // The first leaf fixes the depth: walk down the first items.
  for (const NestedList* p = &values; !p->is_leaf(); p = &p->items()[0]) {
    shape.push_back(static_cast<int64_t>(p->items().size()));
    if (p->items().empty()) break;
  }
  check_nested(values, 0, shape, floating);
  std::vector<double> flat;
  nested_values(values, flat);
  Tensor t = Tensor::from_vector<double>(flat, shape);
  const DType want = dtype ? *dtype : floating ? DType::f32 : DType::i64;
  return t.to(want);
}

Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, std::function<void(void*)> deleter,
                 DType dtype, Device device) {
  VOLT_CHECK(data != nullptr || shape_numel(sizes) == 0, "from_blob", "got a null data pointer");
  VOLT_CHECK(strides.size() == sizes.size(), "from_blob",
             shape_str(strides) << " strides for a shape of " << sizes.size() << " dims " << shape_str(sizes));
  // The storage spans up to the element farthest from the start.
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    VOLT_CHECK(sizes[i] >= 0 && strides[i] >= 0, "from_blob",
               "sizes " << shape_str(sizes) << " and strides " << shape_str(strides) << " must be non-negative");
    if (sizes[i] > 0) last += (sizes[i] - 1) * strides[i];
  }
  auto storage = std::make_shared<Storage>();
  storage->data = data;
  storage->nbytes = shape_numel(sizes) == 0 ? 0 : static_cast<size_t>(last + 1) * dtype_size(dtype);
  storage->device = device;
  storage->deleter = std::move(deleter);  // none: the caller keeps the memory
  return make_tensor(std::move(storage), sizes, strides, 0, dtype, device);
}

Tensor from_blob(void* data, const Shape& sizes, std::function<void(void*)> deleter, DType dtype, Device device) {
  return from_blob(data, sizes, contiguous_strides(sizes, "from_blob"), std::move(deleter), dtype, device);
}

Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device) {
  return from_blob(data, sizes, contiguous_strides(sizes, "from_blob"), {}, dtype, device);
}

Tensor randperm(int64_t n, DType dtype, Device device) {
  VOLT_CHECK(n >= 0, "randperm", "n must be non-negative, got " << n);
  VOLT_CHECK(dtype == DType::i64 || dtype == DType::i32 || is_floating(dtype), "randperm",
             "expected an integer or floating dtype, got " << dtype_name(dtype));
  // One Philox draw of n uniforms (advancing the generator as rand(n) would),
  // sorted: the permutation that sorts them, ties broken by position.
  const PhiloxState st = rng_reserve(static_cast<uint64_t>(n));
  std::vector<double> key(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) key[i] = philox_uniform_f64(st.seed, st.offset, static_cast<uint64_t>(i));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  Tensor t = Tensor::from_vector<int64_t>(perm, {n});
  if (dtype != DType::i64) t = t.to(dtype);
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace volt
