// Optimizers' state as named tensors (state_dict / load_state_dict), with
// PyTorch's names, for checkpoints that resume a run exactly.
#include <map>
#include <sstream>

#include <volt/nn/optim.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/error.h>

namespace volt::nn {

NamedTensors Optimizer::state_dict() const {
  auto* self = const_cast<Optimizer*>(this);  // state_slots hands out pointers; nothing is written
  NamedTensors out;
  out.emplace_back("lr", Tensor::scalar_tensor(lr(), DType::f64));
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto& [name, slot] : self->state_slots(i)) {
      if (slot->defined()) out.emplace_back("state." + std::to_string(i) + "." + name, *slot);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  // Every name this optimizer knows, with where it goes and the shape it must have.
  struct Target {
    Tensor* slot;
    const Tensor* param;
  };
  std::map<std::string, Target> known;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto& [name, slot] : state_slots(i)) known["state." + std::to_string(i) + "." + name] = {slot, &params_[i]};
  }
  std::ostringstream problems;
  double new_lr = lr();
  for (const auto& [name, t] : state) {
    if (name == "lr") {
      if (t.numel() != 1) problems << "\n  'lr' must hold one value, got shape " << shape_str(t.sizes());
      else new_lr = t.to(kCPU).to(DType::f64).item<double>();
      continue;
    }
    auto it = known.find(name);
    if (it == known.end()) {
      problems << "\n  unexpected '" << name << "' (this optimizer has " << params_.size() << " parameters)";
      continue;
    }
    const bool scalar = name.size() >= 5 && name.compare(name.size() - 5, 5, ".step") == 0;
    if (!scalar && t.sizes() != it->second.param->sizes())
      problems << "\n  '" << name << "' has shape " << shape_str(t.sizes()) << ", its parameter "
               << shape_str(it->second.param->sizes());
  }
  VOLT_CHECK(problems.str().empty(), "load_state_dict", "the optimizer state does not fit:" << problems.str());
  NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    if (name == "lr") continue;
    Target& target = known.at(name);
    const bool scalar = name.compare(name.size() - 5, 5, ".step") == 0;
    *target.slot = scalar ? t.to(kCPU).to(DType::f64).clone()
                          : t.to(target.param->device()).to(target.param->dtype()).clone();
  }
  set_lr(new_lr);
  state_loaded();
}

std::vector<std::pair<std::string, Tensor*>> SGD::state_slots(size_t i) {
  if (momentum_.size() < params_.size()) momentum_.resize(params_.size());
  return {{"momentum_buffer", &momentum_[i]}};
}

std::vector<std::pair<std::string, Tensor*>> AdamBase::state_slots(size_t i) {
  State& s = state_.at(i);
  // The count as a tensor, kept in step with the integer (or the compiled step's tensor).
  const int64_t count = step_count(i);
  s.saved_step = s.m.defined() ? Tensor::scalar_tensor(static_cast<double>(count), DType::f64) : Tensor();
  return {{"step", &s.saved_step}, {"exp_avg", &s.m}, {"exp_avg_sq", &s.v}};
}

void AdamBase::state_loaded() {
  for (State& s : state_) {
    if (!s.saved_step.defined()) continue;
    s.step = static_cast<int64_t>(s.saved_step.item<double>());
    if (step_.defined()) step_.fill_(static_cast<double>(s.step));
  }
}

std::vector<std::pair<std::string, Tensor*>> Adadelta::state_slots(size_t i) {
  State& s = state_.at(i);
  return {{"square_avg", &s.square_avg}, {"acc_delta", &s.acc_delta}};
}

}  // namespace volt::nn
