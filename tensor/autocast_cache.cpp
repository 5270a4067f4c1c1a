// Autocast's cast cache (tensor/autocast.h): an f32 parameter's bf16/f16 copy
// made once per value of the parameter, not once per use and step.  Every
// write of a copy bumps its version (mark_modified here, in Adam's pass and
// after a compiled step's update), so the AMX GEMM keeps each copy packed
// once per value (tensor/cpu/gemm_amx_weights.h).
#include <mutex>
#include <unordered_map>

#include <volt/tensor/autocast.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/cpu/gemm_amx_weights.h>

namespace volt {

namespace {

struct Entry {
  std::weak_ptr<TensorImpl> param;  // the entry's key, checked: an address can be reused
  std::weak_ptr<Storage> storage;   // the parameter's data when the copy was made ...
  Shape sizes, strides;
  int64_t offset = 0;
  uint64_t version = 0;             // ... and its write count then
  Tensor copy;                      // contiguous, no history; its aliases are handed out
};

std::mutex g_mutex;
// Never destroyed: its copies' storage goes back to the CPU backend, which may
// be gone by the time static objects are destroyed at exit.
std::unordered_map<const TensorImpl*, Entry>& g_cache = *new std::unordered_map<const TensorImpl*, Entry>();
size_t g_inserts_since_prune = 0;

bool same_param(const Entry& e, const Tensor& t) {
  return e.param.lock() == t.impl_ptr() && e.storage.lock() == t.impl()->storage && e.sizes == t.sizes() &&
         e.strides == t.strides() && e.offset == t.impl()->offset;
}

bool up_to_date(const Entry& e, const Tensor& t, DType low) {
  return same_param(e, t) && e.version == t.version() && e.copy.dtype() == low;
}

// Drops the entries of parameters that no longer exist, now and then.
void prune_locked() {
  if (g_inserts_since_prune <= g_cache.size()) return;
  g_inserts_since_prune = 0;
  std::erase_if(g_cache, [](const auto& kv) { return kv.second.param.expired(); });
}

// A new handle on the copy's data: what the cast gives this time.
Tensor alias(const Tensor& copy) {
  const TensorImpl& c = *copy.impl();
  return make_tensor(c.storage, c.sizes, c.strides, c.offset, c.dtype, c.device);
}

}  // namespace

bool autocast_caches(const Tensor& t) {
  return current_mode() == nullptr && t.defined() && t.has_data() && t.is_leaf() && t.requires_grad() &&
         t.dtype() == DType::f32 && t.device().is_cpu();
}

Tensor autocast_cached_value(const Tensor& t, DType low) {
  Attrs at;
  at.dtype = low;
  OpCall call{OpId::convert_element_type, {t}, at};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    prune_locked();  // before `e` is taken: it may erase entries
    Entry& e = g_cache[t.impl()];
    if (!up_to_date(e, t, low)) {
      // A stale copy nothing else holds is written again in place (no fresh
      // pages); otherwise a new one.  Its version moves on, so a graph that
      // saved the old value notices.
      const bool reuse = e.copy.defined() && same_param(e, t) && e.copy.dtype() == low &&
                         e.copy.impl()->storage.use_count() == 1;
      if (reuse) {
        std::vector<Tensor> outs{e.copy};
        backend_for(DeviceType::CPU)->run(call, outs);
        e.copy.mark_modified();
      } else {
        e = Entry{};
        e.copy = run_prim(call).at(0);
        cpu::amx_keep_packed(e.copy);
        ++g_inserts_since_prune;
      }
      e.param = t.impl_ptr();
      e.storage = t.impl()->storage;
      e.sizes = t.sizes();
      e.strides = t.strides();
      e.offset = t.impl()->offset;
      e.version = t.version();
    }
    return alias(e.copy);
  }
}

Tensor autocast_cached_cast(const Tensor& t, DType low) {
  Attrs at;
  at.dtype = low;
  OpCall call{OpId::convert_element_type, {t}, at};
  std::vector<Tensor> outs{autocast_cached_value(t, low)};
  record_for_grad(call, outs);  // the gradient of a cast is a cast back, as when it runs
  return outs[0];
}

Tensor autocast_cached_copy(const Tensor& param) {
  if (!param.defined() || !param.has_data()) return Tensor();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(param.impl());
  if (it == g_cache.end() || !up_to_date(it->second, param, it->second.copy.dtype())) return Tensor();
  return it->second.copy;
}

void autocast_copy_rewritten(const Tensor& param) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(param.impl());
  if (it == g_cache.end() || !same_param(it->second, param)) return;
  it->second.version = param.version();
  it->second.copy.mark_modified();
}

void clear_autocast_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_cache.clear();
}

size_t autocast_cache_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::erase_if(g_cache, [](const auto& kv) { return kv.second.param.expired(); });
  return g_cache.size();
}

}  // namespace volt
