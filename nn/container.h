// Containers that hold modules without running them: the model's own forward
// decides the order (a GPT's list of blocks, its dict of named parts).
//
//   auto h = std::make_shared<volt::nn::ModuleList>();
//   for (int i = 0; i < 4; ++i) h->push_back(std::make_shared<Block>(config));
//   for (auto& block : *h) x = (*block)(x);      // children "0", "1", ... ("h.0.attn.c_attn.weight")
//
//   auto transformer = std::make_shared<volt::nn::ModuleDict>();
//   transformer->insert("wte", std::make_shared<volt::nn::Embedding>(256, 128));
//   (*transformer)["wte"];                       // the module of that name
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>

namespace volt::nn {

class ModuleList : public Module, public Holder<ModuleList> {
 public:
  ModuleList() : Module("ModuleList") {}
  // Empty until assigned (nn/holder.h): ModuleList h{nullptr}; h = register_module("h", ModuleList());
  explicit ModuleList(std::nullptr_t) : Module("ModuleList"), Holder<ModuleList>(nullptr) {}
  using Holder<ModuleList>::operator=;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);  // named by its position
  size_t size() const { return modules_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  // The i-th module as its class (a volt::Error if it is another class).
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    VOLT_CHECK(m != nullptr, "ModuleList", "module " << i << " is a " << (*this)[i]->type_name());
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  // A list is not called: its owner runs the modules (a volt::Error says so).
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}

  // Names are unique and contain no '.'; they keep their insertion order.
  void insert(const std::string& name, std::shared_ptr<Module> module);
  bool contains(const std::string& name) const;
  std::shared_ptr<Module> operator[](const std::string& name) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& name) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[name]);
    VOLT_CHECK(m != nullptr, "ModuleDict", "module '" << name << "' is a " << (*this)[name]->type_name());
    return m;
  }
  std::vector<std::string> keys() const;
  size_t size() const { return named_children().size(); }

  Tensor forward(const Tensor& x) override;
};

}  // namespace volt::nn
