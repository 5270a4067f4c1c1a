// The AMX bf16 GEMM of tensor/cpu/gemm_amx.h.
//
// Every tile is configured as 16 rows of 64 bytes: tmm0-3 hold a 32 x 32 block
// of C in f32 (2 x 2 tiles), tmm4-5 two (16 x 32) bf16 tiles of A, tmm6-7 two
// tiles of B.  tdpbf16ps reads B in the "VNNI" layout: row p of a B tile holds,
// for each of its 16 columns j, the pair (B[2p, j], B[2p + 1, j]) in one
// 32-bit word.  So A and B are packed per k-block into chunks of 32 along k:
//   A block (32 rows):   [chunk][row 0..31][32 bf16 along k]     (tile h = rows 16h..16h+15)
//   B panel (32 cols):   [chunk][h 0..1][pair p 0..15][col 0..15][2 bf16]
// with zeros past the live rows, columns and k, so any m, n, k works.  B is
// packed a column group at a time (panels of all of k, k block after k block:
// gemm_tiles says why), A a 32-row block per k block.  The tile configuration
// and the tile data belong to a thread: each task loads the configuration and
// releases the tiles when done.
#include <volt/tensor/cpu/gemm_amx.h>

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/error.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define VOLT_AMX_X86 1
#endif

namespace volt::cpu {
namespace {

constexpr int64_t kChunk = 32;          // k per tile step
constexpr int64_t kChunkElems = 1024;   // bf16 per packed chunk of a block or panel (two tiles)
constexpr int64_t kKc = 256;            // the most k per packed block (a multiple of kChunk)
// Packed B per column group, all of k: half of a core's 2 MB L2, the rest
// for the sums kept between k blocks and for A.
constexpr int64_t kGroupBytes = int64_t(1) << 20;
constexpr int MB = 32, NB = 32;         // the C block of one call of the tile kernel

struct Availability {
  bool ok = false;
  std::string why;
  bool refused = false;  // the CPU has AMX, the OS did not grant it
};

const Availability& availability() {
  static const Availability a = []() -> Availability {
#ifdef VOLT_AMX_X86
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return {false, "this CPU has no CPUID leaf 7"};
    if (!((edx >> 22) & 1u) || !((edx >> 24) & 1u))
      return {false, "this CPU has no AMX-BF16 (CPUID.(7,0):EDX bits 22 and 24)"};
    // Linux hands out the 8 KiB of tile state only on request; the grant is
    // the process's (every thread, those started before it too).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      const int err = errno;
      return {false,
              std::string("the OS refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                  std::strerror(err) + ")",
              true};
    }
    return {true, ""};
#else
    return {false, "AMX needs an x86-64 Linux build"};
#endif
  }();
  return a;
}

// 64-byte aligned bf16 bits, grown as needed.
struct Buffer {
  std::unique_ptr<uint16_t[], void (*)(uint16_t*)> p{nullptr, [](uint16_t* q) {
                                                       ::operator delete[](q, std::align_val_t(64));
                                                     }};
  int64_t size = 0;
  uint16_t* get(int64_t n) {
    if (n > size) {
      p.reset(static_cast<uint16_t*>(::operator new[](size_t(n) * 2, std::align_val_t(64))));
      size = n;
    }
    return p.get();
  }
};

// Splits [0, k) into blocks of at most kKc, each a multiple of kChunk but the
// last, of nearly equal size (784 -> 224, 224, 224, 112 rather than a 16 at the end).
int64_t k_block(int64_t k) {
  const int64_t blocks = (k + kKc - 1) / kKc;
  return ((k + blocks - 1) / blocks + kChunk - 1) / kChunk * kChunk;
}

// Columns of B per group: as many 32-column panels as fit kGroupBytes with
// all of k, in groups of nearly equal size; a multiple of NB (the groups
// start on panels, so a packed B's layout is the same for any m).
int64_t group_cols(int64_t k, int64_t n) {
  const int64_t panel_bytes = (k + kChunk - 1) / kChunk * kChunkElems * 2;
  const int64_t most = std::max<int64_t>(1, kGroupBytes / panel_bytes), panels = (n + NB - 1) / NB;
  const int64_t groups = (panels + most - 1) / most;
  return (panels + groups - 1) / groups * NB;
}

// Packing with plain loops: any strides, any live part (zeros elsewhere).
// A block (rows <= 32 live; k in [0, kc)) into dst[chunk][row][32].
void pack_a_loops(const BF16* a, int rows, int64_t kc, int64_t ars, int64_t acs, int64_t ch, uint16_t* d) {
  for (int64_t e = 0; e < kChunk; ++e) {
    const int64_t kk = ch * kChunk + e;
    for (int r = 0; r < MB; ++r) d[r * kChunk + e] = r < rows && kk < kc ? a[r * ars + kk * acs].bits : 0;
  }
}

// Half h (columns 16h..16h+15) of a B panel's chunk ch into d[pair][col][2].
void pack_b_loops(const BF16* b, int cols, int64_t kc, int64_t brs, int64_t bcs, int64_t ch, int h, uint16_t* d) {
  for (int p = 0; p < 16; ++p)
    for (int jj = 0; jj < 16; ++jj)
      for (int e = 0; e < 2; ++e) {
        const int64_t kk = ch * kChunk + 2 * p + e, j = 16 * h + jj;
        d[p * 32 + jj * 2 + e] = kk < kc && j < cols ? b[kk * brs + j * bcs].bits : 0;
      }
}

#ifdef VOLT_AMX_X86
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16,prfchw"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16,prfchw")
#endif

// The tiles' shapes: 8 tiles of 16 rows x 64 bytes (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// GCC's tile intrinsics are asm statements that do not tell the compiler they
// read memory: the packed buffers must be written before they run.
inline void compiler_barrier() { __asm__ __volatile__("" ::: "memory"); }

// For this thread, for one task: the configuration in, the tiles out after.
struct TileScope {
  TileScope() {
    static const TileConfig config;
    compiler_barrier();
    _tile_loadconfig(&config);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// r[i] = row i of a 16 x 16 block of 32-bit words; on return r[j] = column j.
// Pairs of rows interleaved, then pairs of pairs, then the 128-bit lanes.
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + j], lane l: column 4 l + j of rows i..i+3
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), w = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD), w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(v, w, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v, w, 0xDD);
    r[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

inline __mmask32 first_bits(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// A (rows, kc) of 32 rows into dst[chunk][row][32]: rows of A contiguous
// (acs == 1) are copied with masked loads; a transposed A (ars == 1) goes
// through 16 x 16 transposes of bf16 pairs; anything else through loops.
void pack_a(const BF16* a, int rows, int64_t kc, int64_t ars, int64_t acs, uint16_t* dst) {
  const int64_t chunks = (kc + kChunk - 1) / kChunk;
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t ch = 0; ch < chunks; ++ch) {
    uint16_t* d = dst + ch * kChunkElems;
    const int64_t k0 = ch * kChunk;
    if (acs == 1) {
      const __mmask32 mask = first_bits(kc - k0);
      for (int r = 0; r < MB; ++r)
        _mm512_store_si512(d + r * kChunk, r < rows ? _mm512_maskz_loadu_epi16(mask, a + r * ars + k0) : zero);
    } else if (ars == 1 && rows == MB && kc - k0 >= kChunk) {
      // Row kk of A^T as 16 words, each the pair of rows (2q, 2q + 1).
      __m512i lo[16], hi[16];
      for (int e = 0; e < 16; ++e) {
        lo[e] = _mm512_loadu_si512(a + (k0 + e) * acs);
        hi[e] = _mm512_loadu_si512(a + (k0 + 16 + e) * acs);
      }
      transpose16(lo);  // lo[q]: (A[2q, k], A[2q + 1, k]) for k = k0..k0+15
      transpose16(hi);
      const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                            26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
      for (int q = 0; q < 16; ++q) {
        _mm512_store_si512(d + 2 * q * kChunk, _mm512_permutex2var_epi16(lo[q], even, hi[q]));
        _mm512_store_si512(d + (2 * q + 1) * kChunk, _mm512_permutex2var_epi16(lo[q], odd, hi[q]));
      }
    } else {
      pack_a_loops(a, rows, kc, ars, acs, ch, d);
    }
  }
}

// A B panel (kc, cols) of 32 columns into dst[chunk][h][pair][col][2]: rows
// of B contiguous (bcs == 1) are interleaved two at a time; a transposed B
// (brs == 1) already holds the pairs as words, transposed 16 x 16.
void pack_b(const BF16* b, int cols, int64_t kc, int64_t brs, int64_t bcs, uint16_t* dst) {
  const int64_t chunks = (kc + kChunk - 1) / kChunk;
  const __m512i zero = _mm512_setzero_si512();
  // Word t of the result: (row0[t], row1[t]) for the first 16 columns, then the next 16.
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int t = 0; t < 16; ++t) {
    lo_idx[2 * t] = uint16_t(t), lo_idx[2 * t + 1] = uint16_t(32 + t);
    hi_idx[2 * t] = uint16_t(16 + t), hi_idx[2 * t + 1] = uint16_t(48 + t);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __mmask32 mask = first_bits(cols);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    uint16_t* d = dst + ch * kChunkElems;
    const int64_t k0 = ch * kChunk;
    if (bcs == 1) {
      for (int p = 0; p < 16; ++p) {
        const int64_t kk = k0 + 2 * p;
        const __m512i r0 = kk < kc ? _mm512_maskz_loadu_epi16(mask, b + kk * brs) : zero;
        const __m512i r1 = kk + 1 < kc ? _mm512_maskz_loadu_epi16(mask, b + (kk + 1) * brs) : zero;
        _mm512_store_si512(d + p * 32, _mm512_permutex2var_epi16(r0, lo, r1));
        _mm512_store_si512(d + 512 + p * 32, _mm512_permutex2var_epi16(r0, hi, r1));
      }
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      if (brs == 1 && cols >= 16 * (h + 1) && kc - k0 >= kChunk) {
        __m512i w[16];  // w[jj]: column 16h + jj's 16 pairs along k
        for (int jj = 0; jj < 16; ++jj) w[jj] = _mm512_loadu_si512(b + (16 * h + jj) * bcs + k0);
        transpose16(w);
        for (int p = 0; p < 16; ++p) _mm512_store_si512(d + h * 512 + p * 32, w[p]);
      } else {
        pack_b_loops(b, cols, kc, brs, bcs, ch, h, d + h * 512);
      }
    }
  }
}

// A C block (16 R2 or 32 rows, 16 C2 or 32 columns) of sums: loaded from
// `from` (row stride from_ld floats; nullptr: zeros), plus the packed A block
// times the packed B panel, stored to `to` (row stride to_ld).
template <bool R2, bool C2>
void tile_block(const uint16_t* ap, const uint16_t* bp, int64_t chunks, const float* from, int64_t from_ld, float* to,
                int64_t to_ld) {
  const int64_t fl = from_ld * int64_t(sizeof(float)), tl = to_ld * int64_t(sizeof(float));
  if (from) {
    _tile_loadd(0, from, fl);
    if (C2) _tile_loadd(1, from + 16, fl);
    if (R2) _tile_loadd(2, from + 16 * from_ld, fl);
    if (R2 && C2) _tile_loadd(3, from + 16 * from_ld + 16, fl);
  } else {
    _tile_zero(0);
    if (C2) _tile_zero(1);
    if (R2) _tile_zero(2);
    if (R2 && C2) _tile_zero(3);
  }
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const uint16_t* a = ap + ch * kChunkElems;
    const uint16_t* b = bp + ch * kChunkElems;
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b, 64);
    if (C2) _tile_loadd(7, b + 512, 64);
    if (R2) _tile_loadd(5, a + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (C2) _tile_dpbf16ps(1, 4, 7);
    if (R2) _tile_dpbf16ps(2, 5, 6);
    if (R2 && C2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, to, tl);
  if (C2) _tile_stored(1, to + 16, tl);
  if (R2) _tile_stored(2, to + 16 * to_ld, tl);
  if (R2 && C2) _tile_stored(3, to + 16 * to_ld + 16, tl);
}

// One packed A block times one packed B panel, for C[0:rows, 0:cols] (row
// stride ldc).  Between k blocks the sums wait in `acc`, a 32 x 32 block of
// its own (row stride NB): C's rows lie ldc floats apart, at a stride of
// 4 KiB (ldc = 1024) all 32 of them fall in one set of the 12-way L1 cache,
// and a C too large for L2 comes back from memory; loading and storing C
// for every k block took about a quarter of the tile kernel's time in a
// profile at 1024^3.  The first k block starts from zeros; the last one
// stores into C, straight when the block fills whole tiles, else through `acc`.
void block(const uint16_t* ap, const uint16_t* bp, int64_t chunks, float* acc, bool first, bool last, float* c,
           int64_t ldc, int rows, int cols) {
  const bool r2 = rows > 16, c2 = cols > 16;
  const bool whole = rows == (r2 ? 32 : 16) && cols == (c2 ? 32 : 16);
  const float* from = first ? nullptr : acc;
  // C's lines asked for, for writing, before the tile products: with a short
  // k (the GPT's 128) a block is a few hundred cycles of tdpbf16ps, and tile
  // stores into lines not in cache held up the next block's tiles (a product
  // of 2048 x 128 x 384 on one thread went from about 465 to 357 us).
  if (last)
    for (int r = 0; r < rows; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_ET0);
      if (c2) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_ET0);
    }
  float* to = last && whole ? c : acc;
  const int64_t to_ld = last && whole ? ldc : NB;
  if (r2 && c2) tile_block<true, true>(ap, bp, chunks, from, NB, to, to_ld);
  else if (r2) tile_block<true, false>(ap, bp, chunks, from, NB, to, to_ld);
  else if (c2) tile_block<false, true>(ap, bp, chunks, from, NB, to, to_ld);
  else tile_block<false, false>(ap, bp, chunks, from, NB, to, to_ld);
  if (!last || whole) return;
  compiler_barrier();  // the tile stores wrote acc
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, acc + r * NB, size_t(cols) * sizeof(float));
}

// B's block (columns j0.., nc of them; k0.., kc) into bp: its panels split
// over threads.
void pack_b_block(const BF16* b, int64_t j0, int64_t nc, int64_t k0, int64_t kc, int64_t brs, int64_t bcs,
                  uint16_t* bp) {
  const int64_t panels = (nc + NB - 1) / NB, chunks = (kc + kChunk - 1) / kChunk;
  parallel_for(panels, 2, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q)
      pack_b(b + k0 * brs + (j0 + q * NB) * bcs, int(std::min<int64_t>(NB, nc - q * NB)), kc, brs, bcs,
             bp + q * chunks * kChunkElems);
  });
}

// A column group of B (columns j0.., nc of them; all of k) into bg, k block
// after k block, each as pack_b_block lays it out: the block at k0 starts
// after k0 / kChunk chunks of every panel (k_block is a multiple of kChunk).
void pack_b_group(const BF16* b, int64_t j0, int64_t nc, int64_t k, int64_t brs, int64_t bcs, uint16_t* bg) {
  const int64_t kb = k_block(k), panels = (nc + NB - 1) / NB;
  for (int64_t k0 = 0; k0 < k; k0 += kb)
    pack_b_block(b, j0, nc, k0, std::min(kb, k - k0), brs, bcs, bg + panels * (k0 / kChunk) * kChunkElems);
}

// C (m, n) = A B.  The sums of a C block stay in cache from the first k
// block to the last: storing the 4 MB of a 1024 x 1024 C and loading it back
// for every k block, as a loop over k blocks outside the rows would, runs at
// the memory's speed, not the tiles'.  So:
//   for each column group of B (as many columns as fit kGroupBytes with all
//   of k, so that it stays in L2; packed once, split over threads by panel,
//   or taken from `packed`, the groups one after the other),
//     tasks of (32 rows, some of the group's panels), each
//       for each k block: its 32 rows of A packed (they stay in L1 across
//       the panels), then each panel's 32 x 32 block of C, its sums kept
//       between k blocks in the task's own contiguous buffer (block()) and
//       written to C once, after the last k block.
void gemm_tiles(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n, int64_t brs,
                int64_t bcs, const uint16_t* packed, float* c, int64_t ldc) {
  const int64_t row_blocks = (m + MB - 1) / MB, kb = k_block(k), chunks_k = (k + kChunk - 1) / kChunk;
  const int64_t group = group_cols(k, n);
  const int threads = num_threads();
  Buffer bbuf;
  int64_t offset = 0;  // of this group in `packed`
  for (int64_t j0 = 0; j0 < n; j0 += group) {
    const int64_t nc = std::min(group, n - j0), panels = (nc + NB - 1) / NB;
    const uint16_t* bg = packed ? packed + offset : nullptr;
    if (!packed) {
      uint16_t* w = bbuf.get(panels * chunks_k * kChunkElems);
      pack_b_group(b, j0, nc, k, brs, bcs, w);
      bg = w;
    }
    offset += panels * chunks_k * kChunkElems;
    // Enough tasks for the threads to share when there are few row blocks.
    const int64_t per_task =
        threads == 1 ? panels : std::max<int64_t>(1, std::min(panels, row_blocks * panels / (4 * int64_t(threads))));
    const int64_t col_tasks = (panels + per_task - 1) / per_task;
    parallel_tasks(row_blocks * col_tasks, [&](int64_t task) {
      const int64_t i = task / col_tasks, q0 = task % col_tasks * per_task, q1 = std::min(panels, q0 + per_task);
      const int rows = int(std::min<int64_t>(MB, m - i * MB));
      alignas(64) uint16_t ap[MB * kKc];
      // The sums of this task's C blocks between k blocks (see block()); with
      // one k block, one block of scratch for C's partial blocks.
      const int64_t kept = k > kb ? q1 - q0 : 1;
      thread_local Buffer acc_buffer;
      float* acc = reinterpret_cast<float*>(acc_buffer.get(kept * MB * NB * 2));
      TileScope tiles;
      for (int64_t k0 = 0; k0 < k; k0 += kb) {
        const int64_t kc = std::min(kb, k - k0), chunks = (kc + kChunk - 1) / kChunk;
        pack_a(a + i * MB * ars + k0 * acs, rows, kc, ars, acs, ap);
        const uint16_t* bk = bg + panels * (k0 / kChunk) * kChunkElems;
        for (int64_t q = q0; q < q1; ++q)
          block(ap, bk + q * chunks * kChunkElems, chunks, acc + (q - q0) % kept * MB * NB, k0 == 0, k0 + kc == k,
                c + i * MB * ldc + j0 + q * NB, ldc, rows, int(std::min<int64_t>(NB, nc - q * NB)));
      }
    });
  }
}

// All of B packed, group after group as gemm_tiles reads them.
void pack_all(const BF16* b, int64_t k, int64_t n, int64_t brs, int64_t bcs, AmxPackedB& out) {
  const int64_t group = group_cols(k, n), chunks_k = (k + kChunk - 1) / kChunk;
  const int64_t total = (n + NB - 1) / NB * chunks_k * kChunkElems;  // every group's panels of all chunks
  out.k = k, out.n = n, out.elems = total;
  out.data.reset(static_cast<uint16_t*>(::operator new[](size_t(total) * 2, std::align_val_t(64))));
  for (int64_t j0 = 0; j0 < n; j0 += group)
    pack_b_group(b, j0, std::min(group, n - j0), k, brs, bcs, out.data.get() + j0 / NB * chunks_k * kChunkElems);
}

double dot_loop(int64_t iters) {
  TileScope tiles;
  alignas(64) uint16_t ones[512];
  std::fill(ones, ones + 512, uint16_t(0x3F80));  // bf16 1.0
  alignas(64) float out[256];
  compiler_barrier();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  volatile float sink = out[0];
  (void)sink;
  return double(iters) * 4 * (16 * 16 * 32 * 2);
}

#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // VOLT_AMX_X86

}  // namespace

bool amx_supported() { return availability().ok; }

const std::string& amx_unavailable_reason() { return availability().why; }

bool amx_refused() { return availability().refused; }

void gemm_amx(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const BF16* b, int64_t n, int64_t brs,
              int64_t bcs, float* c, int64_t ldc) {
  VOLT_CHECK(amx_supported(), "gemm_bf16", "the amx path is not available: " << amx_unavailable_reason());
#ifdef VOLT_AMX_X86
  gemm_tiles(a, m, k, ars, acs, b, n, brs, bcs, nullptr, c, ldc);
#else
  (void)a, (void)m, (void)k, (void)ars, (void)acs, (void)b, (void)n, (void)brs, (void)bcs, (void)c, (void)ldc;
#endif
}

std::shared_ptr<const AmxPackedB> amx_pack_b(const BF16* b, int64_t k, int64_t n, int64_t brs, int64_t bcs) {
  VOLT_CHECK(amx_supported(), "gemm_bf16", "the amx path is not available: " << amx_unavailable_reason());
  VOLT_CHECK(k > 0 && n > 0, "gemm_bf16", "packs a B of k, n > 0, got " << k << " x " << n);
  auto out = std::make_shared<AmxPackedB>();
#ifdef VOLT_AMX_X86
  pack_all(b, k, n, brs, bcs, *out);
#else
  (void)b, (void)brs, (void)bcs;
#endif
  return out;
}

void gemm_amx_packed(const BF16* a, int64_t m, int64_t k, int64_t ars, int64_t acs, const AmxPackedB& b, float* c,
                     int64_t ldc) {
  VOLT_CHECK(amx_supported(), "gemm_bf16", "the amx path is not available: " << amx_unavailable_reason());
  VOLT_CHECK(m > 0 && k == b.k && ldc >= b.n, "gemm_bf16",
             "a packed B of k = " << b.k << ", n = " << b.n << " takes A (m > 0, k), ldc >= n; got m = " << m
                                  << ", k = " << k << ", ldc = " << ldc);
#ifdef VOLT_AMX_X86
  gemm_tiles(a, m, k, ars, acs, nullptr, b.n, 0, 0, b.data.get(), c, ldc);
#else
  (void)a, (void)m, (void)ars, (void)acs, (void)c;
#endif
}

double amx_dot_loop(int64_t iters) {
#ifdef VOLT_AMX_X86
  if (amx_supported()) return dot_loop(iters);
#endif
  (void)iters;
  return 0;
}

}  // namespace volt::cpu
