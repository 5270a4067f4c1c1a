// volt::nn::Sequential — runs its children in order; they are named "0", "1", ...
//
//   auto seq = std::make_shared<volt::nn::Sequential>();
//   seq->push_back(std::make_shared<volt::nn::Linear>(4, 8));
//   seq->push_back(std::make_shared<volt::nn::ReLU>());
//   volt::Tensor y = (*seq)(x);  // x: (B, 4) -> (B, 8)
//   // parameter names: 0.weight, 0.bias
//
// LibTorch's spelling, layers by value and a function as a layer:
//   volt::nn::Sequential head{nullptr};
//   head = register_module("head", volt::nn::Sequential(volt::nn::Linear(4, 8),
//                                                       volt::nn::Functional(volt::relu),
//                                                       volt::nn::Linear(8, 2)));
//   volt::Tensor y = head->forward(x);
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>

namespace volt::nn {

// A function of one tensor as a layer (LibTorch's torch::nn::Functional):
// Functional(volt::relu), or with the arguments after the input bound,
// Functional(volt::log_softmax, 1) for log_softmax(x, 1).  It has no parameters.
class Functional : public Module {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  explicit Functional(Fn fn);
  template <class F, class... Args>
    requires(sizeof...(Args) > 0)
  explicit Functional(F fn, Args... args)
      : Functional(Fn([fn, args...](const Tensor& x) { return fn(x, args...); })) {}
  Tensor forward(const Tensor& x) override;  // fn(x)

 private:
  Fn fn_;
};

class Sequential : public Module, public Holder<Sequential> {
 public:
  Sequential() : Module("Sequential") {}
  // Empty until assigned (nn/holder.h): Sequential head{nullptr};
  explicit Sequential(std::nullptr_t) : Module("Sequential"), Holder<Sequential>(nullptr) {}
  using Holder<Sequential>::operator=;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  // Layers by value, each moved into a module the Sequential owns.
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && (std::derived_from<std::remove_cvref_t<Ms>, Module> && ...) &&
             !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... layers) : Module("Sequential") {
    (push_back(std::forward<Ms>(layers)), ...);
  }

  void push_back(std::shared_ptr<Module> layer);
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  void push_back(std::shared_ptr<M> layer) {
    push_back(std::shared_ptr<Module>(std::move(layer)));
  }
  template <class M>
    requires(std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>)
  void push_back(M&& layer) {
    push_back(std::shared_ptr<Module>(std::make_shared<std::remove_cvref_t<M>>(std::move(layer))));
  }
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

  Tensor forward(const Tensor& x) override;

 protected:
  explicit Sequential(std::string type_name) : Module(std::move(type_name)) {}
};

}  // namespace volt::nn
