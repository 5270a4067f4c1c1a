// The packed weights of tensor/cpu/gemm_amx_weights.h.
#include <volt/tensor/cpu/gemm_amx_weights.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace volt::cpu {
namespace {

struct Packed {
  uint64_t version = 0;
  int64_t byte_offset = 0, k = 0, n = 0, brs = 0, bcs = 0;  // where B lies in the storage, its layout
  std::shared_ptr<const AmxPackedB> b;
};

struct Kept {
  std::weak_ptr<Storage> storage;  // checked: an address can be reused
  std::vector<Packed> packs;       // one per layout, of its newest version
};

std::mutex g_mutex;
// Never destroyed (as the cast cache): entries may be looked up until exit.
std::unordered_map<const Storage*, Kept>& g_kept = *new std::unordered_map<const Storage*, Kept>();
size_t g_inserts_since_prune = 0;
std::atomic<uint64_t> g_packs{0}, g_hits{0};
// VOLT_AMX_PACKED_WEIGHTS=0 turns it off (to compare).
std::atomic<bool> g_enabled{[] {
  const char* e = std::getenv("VOLT_AMX_PACKED_WEIGHTS");
  return !(e && std::string(e) == "0");
}()};

void prune_locked() {
  if (g_inserts_since_prune <= g_kept.size()) return;
  g_inserts_since_prune = 0;
  std::erase_if(g_kept, [](const auto& kv) { return kv.second.storage.expired(); });
}

}  // namespace

void amx_keep_packed(const Tensor& t) {
  if (!t.defined() || !t.has_data() || t.dtype() != DType::bf16 || !t.device().is_cpu()) return;
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  std::lock_guard<std::mutex> lock(g_mutex);
  prune_locked();
  Kept& k = g_kept[s.get()];
  if (k.storage.lock() != s) {  // new, or a freed storage's address reused
    k = Kept{};
    k.storage = s;
    ++g_inserts_since_prune;
  }
}

std::shared_ptr<const AmxPackedB> amx_packed_weight(const Tensor& t, const BF16* b, int64_t k, int64_t n, int64_t brs,
                                                    int64_t bcs) {
  if (!g_enabled.load(std::memory_order_relaxed) || !t.defined() || !t.has_data() || k <= 0 || n <= 0 ||
      !amx_supported())
    return nullptr;
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  const int64_t offset = reinterpret_cast<const char*>(b) - static_cast<const char*>(s->data);
  const uint64_t version = s->version;
  const auto same = [&](const Packed& p) {
    return p.byte_offset == offset && p.k == k && p.n == n && p.brs == brs && p.bcs == bcs;
  };
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_kept.find(s.get());
    if (it == g_kept.end() || it->second.storage.lock() != s) return nullptr;
    std::vector<Packed>& packs = it->second.packs;
    // Of this storage only the current version's entries stay, one per layout.
    std::erase_if(packs, [&](const Packed& p) { return p.version != version; });
    auto p = std::find_if(packs.begin(), packs.end(), same);
    if (p == packs.end()) {
      // A value's first read in this layout packs as gemm_amx does (block by
      // block, in cache): a training step reads each value once per layout.
      packs.push_back(Packed{version, offset, k, n, brs, bcs, nullptr});
      return nullptr;
    }
    if (p->b) {
      ++g_hits;
      return p->b;
    }
  }
  // Read again: packed whole, outside the lock (on the thread pool), and kept.
  std::shared_ptr<const AmxPackedB> packed = amx_pack_b(b, k, n, brs, bcs);
  ++g_packs;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_kept.find(s.get());
  if (it == g_kept.end() || it->second.storage.lock() != s || s->version != version) return packed;
  for (Packed& p : it->second.packs)
    if (p.version == version && same(p)) p.b = packed;
  return packed;
}

bool amx_packed_weights_enabled() { return g_enabled.load(); }

void set_amx_packed_weights_enabled(bool on) { g_enabled.store(on); }

AmxPackStats amx_pack_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::erase_if(g_kept, [](const auto& kv) { return kv.second.storage.expired(); });
  return {g_packs.load(), g_hits.load(), g_kept.size()};
}

}  // namespace volt::cpu
