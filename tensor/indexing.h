// Indexing with a list, as LibTorch spells it (torch::indexing):
//
//   using namespace volt::indexing;
//   Tensor a = Tensor::arange(12, DType::f32).reshape({3, 4});
//   a.index({1});                         // row 1: tensor([4., 5., 6., 7.])    (a view)
//   a.index({Slice(), Slice(1, 3)});      // columns 1 and 2, shape [3, 2]       (a view)
//   a.index({Ellipsis, -1});              // the last column, shape [3]          (a view)
//   a.index({None, 0});                   // shape [1, 4]                        (a view)
//   a.index({a > 5.0});                   // the elements above 5, 1-D          (a copy)
//   a.index_put_({Slice(0, 2), 0}, 9.0);  // writes through the view
//   a.index_put_({a < 0.0}, 0.0);         // where the mask holds
//
// Integers, slices (step 1), None and Ellipsis give views of the tensor; a boolean
// mask over the leading dims gives a copy when read (its length depends on the
// data, so it runs eagerly and is not differentiable) and is a traceable
// where(mask, value, t) when written.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <variant>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::indexing {

struct NoneT {};
struct EllipsisT {};
inline constexpr NoneT None{};
inline constexpr EllipsisT Ellipsis{};

// One bound of a Slice: an integer, or None (LibTorch's spelling) / std::nullopt
// for "to the end on that side".
class SliceBound {
 public:
  SliceBound() = default;
  template <std::integral I>
    requires(!std::is_same_v<I, bool>)
  SliceBound(I v) : v_(static_cast<int64_t>(v)) {}  // any integer type
  SliceBound(NoneT) {}
  SliceBound(std::nullopt_t) {}
  SliceBound(std::optional<int64_t> v) : v_(v) {}
  const std::optional<int64_t>& value() const { return v_; }

 private:
  std::optional<int64_t> v_;
};

// [start, stop) with step; an empty bound is the whole dim on that side, negative
// bounds count from the end, and bounds past the ends are clamped, as Python's.
//   Slice(1, None), Slice(None, -1), Slice() (all), Slice(2) (from 2 on)
struct Slice {
  Slice(SliceBound start = {}, SliceBound stop = {}, int64_t step = 1)
      : start(start.value()), stop(stop.value()), step(step) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};

class TensorIndex {
 public:
  TensorIndex(int64_t i) : v_(i) {}
  TensorIndex(int i) : v_(static_cast<int64_t>(i)) {}
  TensorIndex(Slice s) : v_(s) {}
  TensorIndex(NoneT n) : v_(n) {}
  TensorIndex(EllipsisT e) : v_(e) {}
  TensorIndex(Tensor mask) : v_(std::move(mask)) {}
  const std::variant<int64_t, Slice, NoneT, EllipsisT, Tensor>& value() const { return v_; }

 private:
  std::variant<int64_t, Slice, NoneT, EllipsisT, Tensor> v_;
};

}  // namespace volt::indexing
