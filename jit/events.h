// Compile events: each front end publishes one after it compiles a program,
// and tools subscribe without the core knowing them (the HTML report of
// jit/inspect/report.h subscribes when volt starts).
//
//   int id = volt::jit::add_compile_hook([](const volt::jit::CompileEvent& e) {
//     std::cerr << "compiled " << e.traces->size() << " traces (" << e.reason << ")\n";
//   });
//   ...
//   volt::jit::remove_compile_hook(id);
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

enum class CompileSource { Jit, Step, Lazy };

struct CompileEvent {
  CompileSource source;
  // The program's owner: a JitFunction (Jit), a CompiledStep (Step), none (Lazy).
  const void* owner = nullptr;
  // Jit: the function's cache, shared by copies of one function.
  std::shared_ptr<const void> identity;
  std::string key;     // the cache key
  std::string reason;  // why it was compiled
  const std::vector<Trace>* traces = nullptr;  // the pass list; the last one runs
  size_t nodes = 0;                            // Lazy: the recorded graph's size
};

using CompileHook = std::function<void(const CompileEvent&)>;

// Adds a hook called (on the compiling thread) after every compile; returns its id.
int add_compile_hook(CompileHook hook);
void remove_compile_hook(int id);
// Calls every hook in the order they were added.
void publish_compile(const CompileEvent& e);

}  // namespace volt::jit
