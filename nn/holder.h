// LibTorch's module-holder spelling for volt's layers, without a second class:
//
//   struct Net : volt::nn::Module {
//     Net() { fc = register_module("fc", volt::nn::Linear(784, 10)); }
//     volt::Tensor forward(const volt::Tensor& x) override { return fc->forward(x); }
//     volt::nn::Linear fc{nullptr};   // empty until assigned
//   };
//
// A layer that derives from Holder<Self> can be made empty from nullptr, and
// assigned the std::shared_ptr that register_module returns; from then on `->`
// and `*` reach the registered module (the one the parent owns, trains and
// moves).  A layer that was never made empty is its own target.  `->` on an
// empty, unassigned layer is a volt::Error naming it.  The plain
// std::make_shared<nn::Linear>(784, 10) spelling is unchanged.
#pragma once
#include <cstddef>
#include <memory>

#include <volt/tensor/error.h>

namespace volt::nn {

template <class Self>
class Holder {
 public:
  Holder() = default;
  explicit Holder(std::nullptr_t) : empty_(true) {}
  Holder(Holder&&) noexcept = default;
  Holder(const Holder&) = delete;

  // Makes this layer stand for `target` (what register_module returned).
  Self& operator=(std::shared_ptr<Self> target) {
    target_ = std::move(target);
    empty_ = target_ == nullptr;
    return static_cast<Self&>(*this);
  }
  Self* operator->() { return &get(); }
  const Self* operator->() const { return &const_cast<Holder*>(this)->get(); }
  Self& operator*() { return get(); }
  // True when made from nullptr and not assigned since (LibTorch's is_empty()).
  bool is_empty() const { return empty_ && !target_; }
  // The shared handle of the module this layer stands for (empty when it stands for itself).
  const std::shared_ptr<Self>& ptr() const { return target_; }

 private:
  Self& get() {
    if (target_) return *target_;
    VOLT_CHECK(!empty_, "nn::Module", "a layer made from nullptr was used before a module was assigned to it");
    return static_cast<Self&>(*this);
  }
  bool empty_ = false;
  std::shared_ptr<Self> target_;
};

}  // namespace volt::nn
