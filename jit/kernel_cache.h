// The host kernel cache: generated C++ compiled by the host compiler into a
// shared library, kept on disk so that a later run loads it instead of
// compiling again.
//
// An entry is two files in the cache directory (VOLT_KERNEL_CACHE, else
// ~/.cache/volt/kernels), named by a 128-bit xxHash of its full key:
//
//   cpu_<hash>.so    the library
//   cpu_<hash>.key   "volt kernel cache 1", the library's size and xxHash,
//                    then the full key: volt's version, the compiler's
//                    identity (resolved path, size, date), the flags, this
//                    CPU's model and flags, and the whole source
//
// Before a cached library is loaded its .key must hold exactly this key and
// the library's size and hash must match; otherwise (truncated, garbled,
// another kernel's files under this name, half written) the entry is
// compiled again, with one line on stderr saying which file and why.  Every
// kernel is exported as <name>_k<hash> (VOLT_KEY in the source), so even a
// library that passed the checks cannot hand out another key's kernel.
//
// The .key detects damage (a torn write, a full disk, a stray edit), not
// tampering: whoever can write the cache directory can write a matching .key
// beside a library of their own.  The defence is ownership: the directory
// (VOLT_KERNEL_CACHE, the default, or the fallback) is made 0700 and used
// only when this effective user owns it and neither its group nor others may
// write it (else a fresh mkdtemp directory, with one line on stderr saying
// why); an entry's files are read or loaded only when they are regular files
// of this user, opened without following links; and every file is written in
// a fresh private directory, opened O_CREAT|O_EXCL|O_NOFOLLOW, then renamed
// into place (tensor/private_files.h).  A file that fails any check is a damaged
// entry: one warning, and the entry is built again.
//
// The compiler runs through posix_spawn with an argument list, no shell, so
// any cache path works.  VOLT_CXX names the compiler (one program, no
// arguments).  If the cache directory cannot be created or written, a
// directory under the system's temporary directory is used instead and a
// message names both.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace volt::jit {

// Compiles `source` (or loads it from the cache) and returns the address of
// each named kernel, in order.  The source must declare its kernels with
// names followed by VOLT_KEY (the cache defines it).  Empty when no compiler
// could build it: `error` then says why (the compiler's output).
std::vector<void*> load_host_kernels(const std::string& source, const std::vector<std::string>& names,
                                     std::string* error);

// One load_host_kernels call, kept for reports (jit/inspect/report.h): where the
// kernels came from ("compiled", "disk cache", "loaded already") and what it cost.
struct KernelLoad {
  std::vector<std::string> names;  // the kernels' symbols (FusedKernel::symbol)
  std::string source;  // the whole source given to the compiler
  std::string outcome;
  double ms = 0;
  std::string library;
  std::string compiler = "host C++ compiler";  // or "NVRTC" (jit/cuda/executors.cpp)
};
// The last 64 loads, oldest first.
std::vector<KernelLoad> recent_kernel_loads();
// Adds a load made elsewhere (a GPU's kernels) to that log.
void note_kernel_load(KernelLoad load);

// The directory entries go to now (after any fallback).
std::filesystem::path kernel_cache_dir();

// The full key an entry of this source has, and the library file it lives in.
std::string kernel_cache_key(const std::string& source);
std::filesystem::path kernel_cache_library(const std::string& source);

// Why the entry at `library` cannot be loaded for `key`, or "" when it can.
std::string kernel_cache_problem(const std::filesystem::path& library, const std::string& key);

// The xxHash (XXH3, 64 bits) of some bytes: the one hash the jit uses.
uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t hash_string(const std::string& s, uint64_t seed = 0) { return hash_bytes(s.data(), s.size(), seed); }

}  // namespace volt::jit
