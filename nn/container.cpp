#include <volt/nn/container.h>

namespace volt::nn {

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) : Module("ModuleList") {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  VOLT_CHECK(i < modules_.size(), "ModuleList", "index " << i << " out of range for " << modules_.size() << " modules");
  return modules_[i];
}

Tensor ModuleList::forward(const Tensor&) {
  VOLT_FAIL("ModuleList", "a ModuleList has no forward: call its modules in the owner's forward");
}

void ModuleDict::insert(const std::string& name, std::shared_ptr<Module> module) { add_child(name, std::move(module)); }

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [n, m] : named_children())
    if (n == name) return true;
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& name) const {
  for (const auto& [n, m] : named_children())
    if (n == name) return m;
  VOLT_FAIL("ModuleDict", "no module named '" << name << "'");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [n, m] : named_children()) out.push_back(n);
  return out;
}

Tensor ModuleDict::forward(const Tensor&) {
  VOLT_FAIL("ModuleDict", "a ModuleDict has no forward: call its modules in the owner's forward");
}

}  // namespace volt::nn
