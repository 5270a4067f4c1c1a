// Optimizers' state as named tensors (state_dict / load_state_dict), with
// PyTorch's names, for checkpoints that resume a run exactly.
#include <cmath>
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

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The values' range, as f64 on the CPU: what a resumed run could not survive
// (a NaN moment, a negative second moment under a square root, a step count
// that is not a count) is named here.
void check_values(const std::string& name, const Tensor& t, std::ostream& problems) {
  const std::vector<double> v = t.to(kCPU).to(DType::f64).contiguous().to_vector<double>();
  const bool step = name == "lr" || ends_with(name, ".step");
  const bool non_negative = step || ends_with(name, ".exp_avg_sq") || ends_with(name, ".square_avg") ||
                            ends_with(name, ".acc_delta");
  for (double x : v) {
    if (!std::isfinite(x)) {
      problems << "\n  '" << name << "' holds " << x << " (state must be finite)";
      return;
    }
    if (non_negative && x < 0) {
      problems << "\n  '" << name << "' holds " << x << " (it must be >= 0)";
      return;
    }
    if (name != "lr" && step && (x != std::floor(x) || x > 9007199254740992.0)) {
      problems << "\n  '" << name << "' holds " << x << " (a step count must be a whole number up to 2^53)";
      return;
    }
  }
}

// Whether a slot holds anything but the zeros made ahead of a first step.
bool holds_state(const Tensor& t) {
  for (double x : t.to(kCPU).to(DType::f64).contiguous().to_vector<double>())
    if (x != 0) return true;
  return false;
}

}  // namespace

// Every name this optimizer knows, with its slot and parameter.
struct StateTarget {
  Tensor* slot;
  const Tensor* param;
};

void Optimizer::check_state_dict(const NamedTensors& state) {
  std::map<std::string, StateTarget> known;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto& [name, slot] : state_slots(i)) known["state." + std::to_string(i) + "." + name] = {slot, &params_[i]};
  }
  std::ostringstream problems;
  std::map<std::string, int> seen;
  for (const auto& [name, t] : state) {
    if (++seen[name] == 2) problems << "\n  '" << name << "' appears twice";
    if (!t.defined()) {
      problems << "\n  '" << name << "' is an undefined tensor";
      continue;
    }
    if (name == "lr") {
      if (t.numel() != 1) problems << "\n  'lr' must hold one value, got shape " << shape_str(t.sizes());
      else check_values(name, t, problems);
      continue;
    }
    auto it = known.find(name);
    if (it == known.end()) {
      problems << "\n  unexpected '" << name << "' (this optimizer has " << params_.size() << " parameters)";
      continue;
    }
    const Tensor& param = *it->second.param;
    if (ends_with(name, ".step")) {
      if (t.numel() != 1) problems << "\n  '" << name << "' must hold one value, got shape " << shape_str(t.sizes());
      else check_values(name, t, problems);
      continue;
    }
    if (t.sizes() != param.sizes())
      problems << "\n  '" << name << "' has shape " << shape_str(t.sizes()) << ", its parameter "
               << shape_str(param.sizes());
    else if (t.dtype() != param.dtype())
      problems << "\n  '" << name << "' has dtype " << dtype_name(t.dtype()) << ", its parameter "
               << dtype_name(param.dtype());
    else
      check_values(name, t, problems);
  }
  // State this optimizer holds that the dict lacks would be kept from another
  // point of the run: a torn or partial state dict.
  // (Zeros made ahead of a first step, as a compiled step makes them, are no
  // state yet.)
  for (auto& [name, target] : known)
    if (target.slot->defined() && !seen.count(name) && holds_state(*target.slot))
      problems << "\n  missing '" << name << "'";
  VOLT_CHECK(problems.str().empty(), "load_state_dict", "the optimizer state does not fit:" << problems.str());
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  check_state_dict(state);
  std::map<std::string, StateTarget> known;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto& [name, slot] : state_slots(i)) known["state." + std::to_string(i) + "." + name] = {slot, &params_[i]};
  }
  NoGradGuard no_grad;
  double new_lr = lr();
  for (const auto& [name, t] : state) {
    if (name == "lr") {
      new_lr = t.to(kCPU).to(DType::f64).item<double>();
      continue;
    }
    StateTarget& target = known.at(name);
    const bool scalar = ends_with(name, ".step");
    const Tensor value = scalar ? t.to(kCPU).to(DType::f64).reshape({}) : t.to(target.param->device());
    // Into the slot already held (a compiled step has its handle); a slot not
    // made yet is made from the value.
    if (target.slot->defined() && target.slot->sizes() == value.sizes() && target.slot->dtype() == value.dtype())
      target.slot->copy_(value);
    else
      *target.slot = value.clone();
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
