#include <volt/tensor/scope.h>

#include <utility>

namespace volt {
namespace {
thread_local int recording = 0;
thread_local std::string scope;
}  // namespace

bool scope_wanted() { return recording > 0; }
const std::string& current_scope() { return scope; }

ScopeRecording::ScopeRecording() { ++recording; }
ScopeRecording::~ScopeRecording() { --recording; }

ScopeGuard::ScopeGuard(std::string path) : saved_(std::exchange(scope, std::move(path))) {}
ScopeGuard::~ScopeGuard() { scope = std::move(saved_); }

}  // namespace volt
