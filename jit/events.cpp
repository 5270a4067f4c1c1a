#include <volt/jit/events.h>

#include <mutex>
#include <utility>

namespace volt::jit {

namespace {

struct Hooks {
  std::mutex mutex;
  int next = 0;
  std::vector<std::pair<int, CompileHook>> list;
};

Hooks& hooks() {
  static Hooks* h = new Hooks;  // never destroyed: compiles may run during exit
  return *h;
}

}  // namespace

int add_compile_hook(CompileHook hook) {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.list.emplace_back(h.next, std::move(hook));
  return h.next++;
}

void remove_compile_hook(int id) {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  std::erase_if(h.list, [id](const auto& p) { return p.first == id; });
}

void publish_compile(const CompileEvent& e) {
  std::vector<std::pair<int, CompileHook>> list;
  {
    Hooks& h = hooks();
    std::lock_guard<std::mutex> lock(h.mutex);
    list = h.list;  // a hook may add or remove hooks
  }
  for (const auto& [id, hook] : list) hook(e);
}

}  // namespace volt::jit
