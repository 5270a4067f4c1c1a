#include <volt/jit/executor_registry.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/custom_op.h>

namespace volt::jit {

namespace {

// Never destroyed, like the executor registry: static executors die in any order.
std::mutex& owners_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<int64_t, const Executor*>& owners() {
  static auto* o = new std::unordered_map<int64_t, const Executor*>;
  return *o;
}

}  // namespace

Executor* get_executor(const std::string& name) {
  for (Executor* e : registered_executors())
    if (e->name() == name) return e;
  return nullptr;
}

std::vector<Executor*> get_all_executors() { return registered_executors(); }

std::vector<Executor*> get_default_executors() { return builtin_executors(); }

void add_default_executor(Executor& ex) {
  register_executor(ex);  // a name taken by another executor is an error here
  remove_builtin_executor(ex);
  add_builtin_executor(ex, /*before_others=*/true);
}

void remove_default_executor(Executor& ex) {
  VOLT_CHECK(&ex != &eager_executor(), "remove_default_executor",
             "eager runs every op no other executor claims; it cannot be removed");
  remove_builtin_executor(ex);
}

std::vector<Value> executor_arguments(const OpCall& c) {
  std::vector<Value> r = c.args;
  if (c.op == OpId::cross_entropy || c.op == OpId::cross_entropy_backward || c.op == OpId::nll_loss) {
    const CrossEntropyOptions o = cross_entropy_options(c.attrs);
    r.emplace_back(static_cast<int64_t>(o.reduction));
    r.emplace_back(o.ignore_index);
    if (c.op != OpId::nll_loss) r.emplace_back(o.label_smoothing);
  }
  if (c.op == OpId::scaled_dot_product_attention || c.op == OpId::scaled_dot_product_attention_backward) {
    r.emplace_back(c.attrs.flag);
    r.emplace_back(c.attrs.a);
    r.emplace_back(c.attrs.b);
    r.emplace_back(static_cast<int64_t>(c.attrs.offset));
  }
  // padding_idx decides which row gets no gradient: a grad transform must see it.
  if (c.op == OpId::embedding) r.emplace_back(c.attrs.ints.empty() ? int64_t{-1} : c.attrs.ints[0]);
  return r;
}

void note_operator_owner(int64_t id, const Executor& ex) {
  std::lock_guard<std::mutex> lock(owners_mutex());
  owners()[id] = &ex;
}

const Executor* operator_owner(int64_t id) {
  std::lock_guard<std::mutex> lock(owners_mutex());
  auto it = owners().find(id);
  return it == owners().end() ? nullptr : it->second;
}

void forget_operators_of(const Executor& ex) {
  std::lock_guard<std::mutex> lock(owners_mutex());
  for (auto it = owners().begin(); it != owners().end();)
    it = it->second == &ex ? owners().erase(it) : std::next(it);
}

void check_operator_executors(const std::vector<BoundSymbol>& bsyms, const std::vector<Executor*>& executors) {
  for (const BoundSymbol& b : bsyms) {
    if (b.call.op == OpId::custom) {
      const Executor* owner = operator_owner(b.call.attrs.custom);
      if (owner && std::find(executors.begin(), executors.end(), owner) == executors.end()) {
        std::string list;
        for (const Executor* e : executors) list += (list.empty() ? "" : ", ") + e->name();
        VOLT_FAIL(op_name(b.call), "is an operator of executor \"" << owner->name()
                                       << "\", which this jit does not use (its executors: " << list
                                       << "); add it: jit(f, {.executors = {" << owner->name()
                                       << "}}), or make it a default with add_default_executor");
      }
    }
    check_operator_executors(b.subsymbols, executors);
  }
}

}  // namespace volt::jit
