#include <volt/nn/module.h>
#include <volt/nn/call_observer.h>

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <typeinfo>
#include <utility>
#include <ostream>
#include <sstream>

#include <volt/tensor/dispatch.h>

namespace volt::nn {

namespace {

void check_name(const std::string& what, const std::string& name) {
  VOLT_CHECK(!name.empty() && name.find('.') == std::string::npos, what,
             "name '" << name << "' must be non-empty and contain no '.'");
}

// Points `impl` at a copy of its data on `device`; every handle to `impl` follows.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined()) return;
  TensorImpl* impl = t.impl();
  if (impl->device != device) {
    Tensor moved = t.to(device);
    impl->storage = moved.impl()->storage;
    impl->strides = moved.strides();
    impl->offset = moved.storage_offset();
    impl->device = device;
    impl->backend_state = moved.impl()->backend_state;  // a lazy tensor's value lives here
  }
  if (impl->grad) move_in_place(Tensor(impl->grad), device);
}

// PyTorch's _addindent: every line after the first gets `spaces` more.
std::string indent_tail(const std::string& s, int spaces) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out.append(spaces, ' ');
  }
  return out;
}

}  // namespace

std::string Module::type_name() const {
  if (!type_name_.empty()) return type_name_;
  // The dynamic type's name, demangled, without its namespaces ("app::Net" -> "Net").
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> full(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && full ? full.get() : mangled;
  size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

bool Module::has_member(const std::string& name) const {
  for (const auto& list : {&parameters_, &buffers_})
    for (const auto& [n, t] : *list)
      if (n == name) return true;
  for (const auto& [n, c] : children_)
    if (n == name) return true;
  return false;
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name("register_parameter", name);
  VOLT_CHECK(!has_member(name), "register_parameter",
             type_name() << " already has a member named '" << name << "'");
  if (t.defined()) {
    VOLT_CHECK(t.is_leaf(), "register_parameter",
               "'" << name << "' is the result of an op; pass a leaf (detach() it)");
    // PyTorch's rule: only floating tensors can require grad (an integer
    // parameter could never be trained; an optimizer would skip it silently).
    VOLT_CHECK(!requires_grad || is_floating(t.dtype()), "register_parameter",
               "'" << name << "' is " << dtype_name(t.dtype())
                   << ": only floating tensors can be parameters that require grad (register it with "
                      "requires_grad = false, or as a buffer)");
    t.requires_grad_(requires_grad);
  }
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name("register_buffer", name);
  VOLT_CHECK(!has_member(name), "register_buffer",
             type_name() << " already has a member named '" << name << "'");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name("register_module", name);
  VOLT_CHECK(m != nullptr, "register_module", "module '" << name << "' is null");
  VOLT_CHECK(!has_member(name), "register_module",
             type_name() << " already has a member named '" << name << "'");
  m->parent_ = this;
  m->name_in_parent_ = name;
  children_.emplace_back(name, std::move(m));
}

Module& Module::movable(Module& m) {
  VOLT_CHECK(m.parent_ == nullptr, "register_module",
             "module '" << m.name_in_parent_ << "' is registered already and cannot be moved");
  return m;
}

Module::Module(Module&& other)
    : std::enable_shared_from_this<Module>(),
      type_name_(std::move(movable(other).type_name_)),
      training_(other.training_),
      parameters_(std::move(other.parameters_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)) {
  for (auto& [n, c] : children_)
    if (c->parent_ == &other) c->parent_ = this;
  other.parameters_.clear();
  other.buffers_.clear();
  other.children_.clear();
}

Module::~Module() {
  for (auto& [n, c] : children_)
    if (c->parent_ == this) c->parent_ = nullptr;
}

std::string Module::path() const {
  std::string p;
  for (const Module* m = this; m->parent_ != nullptr; m = m->parent_)
    p = m->name_in_parent_ + (p.empty() ? "" : "." + p);
  return p;
}

namespace {
thread_local const CallObserver* t_observer = nullptr;
}  // namespace

ObserveCalls::ObserveCalls(CallObserver f) : observer_(std::move(f)), saved_(std::exchange(t_observer, &observer_)) {}
ObserveCalls::~ObserveCalls() { t_observer = saved_; }
const CallObserver* call_observer() { return t_observer; }

Tensor Module::scoped_forward(const Tensor& x) {
  Tensor y;
  {
    ScopeGuard scope(path());
    y = forward(x);
  }
  if (t_observer) (*t_observer)(*this, y);
  return y;
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     NamedTensors& out) const {
  // Undefined entries (e.g. Linear without bias) are skipped, as PyTorch skips None.
  for (const auto& [n, t] : buffers ? buffers_ : parameters_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", true, buffers, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all, out;
  collect("", recurse, false, all);
  std::set<const TensorImpl*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(n), t);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, false, out);
  collect("", true, true, out);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, std::shared_ptr<Module>>>& out) const {
  for (const auto& [n, c] : children_) {
    const std::string name = prefix.empty() ? n : prefix + "." + n;
    bool seen = false;
    for (const auto& [m_name, m] : out) seen = seen || m == c;
    if (seen) continue;
    out.emplace_back(name, c);
    c->collect_modules(name, out);
  }
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(bool include_self) const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  if (include_self) {
    std::shared_ptr<Module> self = std::const_pointer_cast<Module>(weak_from_this().lock());
    // Not owned by a shared_ptr: a handle that owns nothing (aliasing an empty one).
    if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
    out.emplace_back("", self);
  }
  collect_modules("", out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
  return *this;
}

Module& Module::requires_grad_(bool on) {
  for (Tensor& p : parameters()) p.requires_grad_(on);
  return *this;
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.impl()->grad.reset();
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) move_in_place(p, device);
  for (const Tensor& b : buffers()) move_in_place(b, device);
  return *this;
}

std::string Module::repr() const {
  std::string extra = extra_repr();
  if (children_.empty()) return type_name() + "(" + extra + ")";
  std::ostringstream os;
  os << type_name() << "(\n";
  if (!extra.empty()) os << "  " << indent_tail(extra, 2) << "\n";
  for (const auto& [n, c] : children_) os << "  (" << n << "): " << indent_tail(c->repr(), 2) << "\n";
  os << ")";
  return os.str();
}

void Module::pretty_print(std::ostream& os) const { os << repr(); }

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.pretty_print(os);
  return os;
}

}  // namespace volt::nn
