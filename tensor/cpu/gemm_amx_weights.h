// Weights packed once per value for the AMX GEMM (tensor/cpu/gemm_amx.h).
//
// The AMX kernel reads B in its tile layout, which costs a pass over B per
// product; at small batches B is the weight in two products of each layer
// (the forward's W^T, the input gradient's W, two layouts).  A storage kept
// here (amx_keep_packed) is one whose every write bumps its version
// (Storage::version): the cast cache's bf16 copies of f32 parameters
// (tensor/autocast.h), rewritten in place with mark_modified by the cast
// cache, by Adam/AdamW and after a compiled step's update.  For such a B,
// the first read of a value in a layout (storage, version, offset, k, n,
// strides) packs it as gemm_amx does, block by block; a second read packs it
// whole and keeps it, and later reads use it until the version moves on.  A
// training step writes every weight and reads each value once per layout,
// so it packs as before; evaluations and inference read a value many times.
// Any other B (an activation, whose memory a plan may reuse without a
// version bump) is packed for each product.  VOLT_AMX_PACKED_WEIGHTS=0 turns
// the keeping off.
//
//   cpu::amx_keep_packed(copy);                     // copy: the cast cache's
//   auto p = cpu::amx_packed_weight(w, b, k, n, brs, bcs);  // or nullptr
//
// The packed forms live as long as their storage (pruned after it is freed);
// each weight has at most one per layout, of its newest version read, so
// about twice the bf16 copy's size for a layer used both ways.
#pragma once
#include <cstdint>
#include <memory>

#include <volt/tensor/cpu/gemm_amx.h>
#include <volt/tensor/tensor.h>

namespace volt::cpu {

// Keeps packed forms of `t`'s storage from now on (until it is freed).  The
// caller promises that every write of it bumps its version.
void amx_keep_packed(const Tensor& t);

// B (k, n; element strides brs, bcs) at `b`, which lies in `t`'s storage,
// packed as of the storage's current version: from the cache, or packed now
// and kept (on its second read).  nullptr on the first read of a value in
// this layout, when the storage is not kept, or AMX is not available.
std::shared_ptr<const AmxPackedB> amx_packed_weight(const Tensor& t, const BF16* b, int64_t k, int64_t n, int64_t brs,
                                                    int64_t bcs);

// Whether kept storages are served packed (default true); off, every product
// packs its B as gemm_amx does, which tests compare against.
bool amx_packed_weights_enabled();
void set_amx_packed_weights_enabled(bool on);

struct AmxPackStats {
  uint64_t packs = 0;   // packed forms made (and kept)
  uint64_t hits = 0;    // products that used a kept one
  size_t storages = 0;  // storages kept (alive)
};
AmxPackStats amx_pack_stats();

}  // namespace volt::cpu
