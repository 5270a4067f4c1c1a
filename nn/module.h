// volt::nn::Module — the base of every layer: named parameters, buffers and
// submodules, train/eval mode, and PyTorch's printed form.
//
//   auto net = std::make_shared<volt::nn::MLP>(784, std::vector<int64_t>{784, 10});
//   for (auto& [name, p] : net->named_parameters()) std::cout << name << " ";
//   // 0.weight 0.bias 3.weight 3.bias
//   net->eval();
//   std::cout << *net;  // MLP(\n  (0): Linear(in_features=784, out_features=784, bias=True) ...
//   volt::Tensor y = (*net)(x);  // x: (B, 784) -> (B, 10)
//
// Parameters are Tensor handles: an optimizer or a jitted module holding the
// same handle sees every change, including a move by to(device).
#pragma once
#include <concepts>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/nn/named_tensor.h>
#include <volt/tensor/scope.h>
#include <volt/tensor/tensor.h>

namespace volt::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  // `type_name` is what the printed form starts with, e.g. "Linear"; left out,
  // it is the class's own name (class Net : public Module prints as "Net(...)").
  explicit Module(std::string type_name = "") : type_name_(std::move(type_name)) {}
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // Moving is for register_module(name, Linear(784, 10)): a module that is not
  // registered anywhere (an error otherwise) hands over its parameters, buffers
  // and children; the moved-from one is left empty.
  Module(Module&& other);

  // Pure, so that a subclass whose forward has another signature (say
  // `Tensor forward(Tensor x)`, which would only hide this one) cannot be
  // instantiated: the mistake is a compile error, not a surprise at run time.
  // A module with several inputs overrides this one to say so (nn/loss.h).
  virtual Tensor forward(const Tensor& x) = 0;
  // While a trace records, the call also says where its ops come from (path()).
  Tensor operator()(const Tensor& x) { return scope_wanted() ? scoped_forward(x) : forward(x); }
  // The dotted names from the outermost module this one is registered in down
  // to it ("transformer.h.0.attn"; "" for that outermost one), as named_modules()
  // names it there.  A module registered in several places has the last one's.
  std::string path() const;

  // ---- registration (names are unique within one module) ----
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // LibTorch's spelling with a layer by value: register_module("fc", nn::Linear(784, 10))
  // moves it into a new shared module and returns that (nn/holder.h).  A named
  // layer (an lvalue) is moved too, and then stands for the registered one.
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  std::shared_ptr<std::remove_cvref_t<M>> register_module(const std::string& name, M&& m) {
    using Layer = std::remove_cvref_t<M>;
    auto moved = std::make_shared<Layer>(std::move(m));
    add_child(name, moved);
    if constexpr (std::is_lvalue_reference_v<M> && std::is_assignable_v<Layer&, std::shared_ptr<Layer>>) m = moved;
    return moved;
  }

  // ---- traversal, in registration order, with PyTorch's dotted names ("3.bias") ----
  // A tensor registered under several names (a tied weight) is listed once,
  // under the first name met, as PyTorch's named_parameters() does.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  // Every name of every parameter, then of every buffer, tied ones under each
  // of their names: what PyTorch's state_dict() holds and nn::save writes.
  NamedTensors state_dict() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // This module (named "", unless include_self is false) and every module
  // below it, depth first, each once, named with dots ("transformer.h.0.attn").
  // The handle to this module owns nothing when it was not made by make_shared.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(bool include_self = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  int64_t num_parameters() const;  // total elements over all parameters
  // This module as class M, or nullptr if it is another class (LibTorch's
  // as<M>()): for (auto& block : *h) x = block->as<Block>()->forward(x);
  template <class M>
  M* as() {
    return dynamic_cast<M*>(this);
  }
  template <class M>
  const M* as() const {
    return dynamic_cast<const M*>(this);
  }

  // ---- mode and state (each returns *this so calls chain: net.eval().requires_grad_(false)) ----
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  Module& requires_grad_(bool on = true);
  void zero_grad();  // grads become undefined, as PyTorch's set_to_none=True
  // Moves every parameter, gradient and buffer to `device` in place: the
  // TensorImpl each handle points at gets the new storage, so holders of the
  // handles see the move.
  Module& to(Device device);

  // ---- printing ----
  std::string type_name() const;
  // What goes between the parentheses, e.g. "in_features=784, out_features=10, bias=True".
  virtual std::string extra_repr() const { return ""; }
  std::string repr() const;
  void pretty_print(std::ostream& os) const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  static Module& movable(Module& m);  // m, or an error if it is registered somewhere
  bool has_member(const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, std::shared_ptr<Module>>>& out) const;

  Tensor scoped_forward(const Tensor& x);

  std::string type_name_;
  bool training_ = true;
  Module* parent_ = nullptr;  // cleared when the parent goes first
  std::string name_in_parent_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace volt::nn
