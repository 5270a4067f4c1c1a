// Where an op was called from: the dotted path of the module whose forward was
// running ("transformer.h.0.attn"), so that a trace can say which layer each
// of its lines came from (the jit report groups a model's kernels by layer).
//
// Only a recorder wants it: a tracer turns recording on for its thread, and a
// module's call then sets the scope around its forward (nn/module.h).  Eager
// calls pay one thread-local read.
//
//   volt::ScopeRecording on;               // while tracing
//   { volt::ScopeGuard s("transformer.h.0"); ... volt::current_scope() ... }
#pragma once
#include <string>

namespace volt {

// Whether this thread records scopes now.
bool scope_wanted();
// The scope of the ops called now ("" outside every module).
const std::string& current_scope();

// Turns scope recording on for this thread while it lives (nests).
class ScopeRecording {
 public:
  ScopeRecording();
  ~ScopeRecording();
  ScopeRecording(const ScopeRecording&) = delete;
  ScopeRecording& operator=(const ScopeRecording&) = delete;
};

// Makes `path` the current scope while it lives, then restores the one before.
class ScopeGuard {
 public:
  explicit ScopeGuard(std::string path);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  std::string saved_;
};

}  // namespace volt
