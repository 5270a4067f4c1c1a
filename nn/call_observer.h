// Watching module calls: while an ObserveCalls lives, every call of a module
// on this thread (module(x), also a Sequential's layers) reports the module and
// what its forward returned, innermost first.  volt::utils::summary learns each
// layer's output shape this way; the modules themselves carry no hooks.
//
//   volt::nn::ObserveCalls watch([&](const volt::nn::Module& m, const volt::Tensor& y) { ... });
//   model(x);
#pragma once
#include <functional>

#include <volt/tensor/scope.h>
#include <volt/tensor/tensor.h>

namespace volt::nn {

class Module;
using CallObserver = std::function<void(const Module& module, const Tensor& output)>;

class ObserveCalls {
 public:
  explicit ObserveCalls(CallObserver observer);
  ~ObserveCalls();
  ObserveCalls(const ObserveCalls&) = delete;
  ObserveCalls& operator=(const ObserveCalls&) = delete;

 private:
  CallObserver observer_;
  const CallObserver* saved_;
  ScopeRecording scopes_;  // module calls then pass through Module::scoped_forward
};

// The observer of this thread's calls now; null when none.
const CallObserver* call_observer();

}  // namespace volt::nn
