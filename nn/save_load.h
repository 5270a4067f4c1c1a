// LibTorch's whole-object saves: volt::save(net, path) and volt::load(net, path)
// for a module handle, and the same for an optimizer's state.
//
//   auto net = std::make_shared<Net>();
//   volt::save(net, "net.safetensors");        // every parameter and buffer (nn/serialize.h)
//   volt::save(optimizer, "opt.safetensors");  // lr and every slot of state (state_dict())
//   volt::load(net, "net.safetensors");         // in place; every name, shape and dtype must match
//   volt::load(optimizer, "opt.safetensors");
#pragma once
#include <concepts>
#include <memory>
#include <string>

#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/nn/serialize.h>

namespace volt {

template <std::derived_from<nn::Module> M>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  VOLT_CHECK(module != nullptr, "save", "the module handle is empty");
  nn::save(*module, path);
}
template <std::derived_from<nn::Module> M>
void load(const std::shared_ptr<M>& module, const std::string& path) {
  VOLT_CHECK(module != nullptr, "load", "the module handle is empty");
  nn::load(*module, path);
}
inline void save(const nn::Optimizer& optimizer, const std::string& path) {
  nn::save_tensors(optimizer.state_dict(), path);
}
inline void load(nn::Optimizer& optimizer, const std::string& path) {
  optimizer.load_state_dict(nn::load_tensors(path));
}

}  // namespace volt
