// The fuzz targets: each hands a reader of files bytes it has never seen.  A
// volt::Error is the right answer to bad bytes; a crash, a sanitizer report or
// any other exception is a defect.  The same functions serve libFuzzer
// (fuzz_main.cc) and the corpus replay in every test run (test_fuzz_corpus.cpp).
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <filesystem>

#include <volt/data/idx.h>
#include <volt/jit/kernel_cache.h>
#include <volt/nn/sequential.h>
#include <volt/nn/serialize.h>

namespace volt::fuzz {

// One scratch file per process, rewritten for each input.
inline const std::string& scratch_path() {
  static const std::string p = "/tmp/volt-fuzz-" + std::to_string(::getpid()) + ".bin";
  return p;
}

inline void write_scratch(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(scratch_path().c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + scratch_path());
  if (size > 0 && std::fwrite(data, 1, size, f) != size) {
    std::fclose(f);
    throw std::runtime_error("cannot write " + scratch_path());
  }
  std::fclose(f);
}

// Reads the file as read_idx does for MNIST (any rank, then images and labels).
inline void read_idx_all() {
  try {
    data::IdxArray a = data::read_idx(scratch_path());
    Tensor t = data::to_tensor(a);
    if (t.numel() != static_cast<int64_t>(a.bytes.size())) std::abort();
    if (a.dims.size() >= 2) data::images_to_float(a);
    if (a.dims.size() == 1) data::labels_to_int64(a);
  } catch (const Error&) {
  }
}

// The input as an IDX file, raw (or gzip, when it starts with gzip's magic).
inline int idx_raw(const uint8_t* data, size_t size) {
  write_scratch(data, size);
  read_idx_all();
  return 0;
}

// The input gzip-compressed, then damaged as its first byte says: kept whole,
// cut short, or one byte of the compressed stream changed.  This reaches the
// IDX parser through the gzip layer and the gzip layer's own error paths.
inline int idx_gzip(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> gz(deflateBound(&zs, size) + 32);
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = gz.data();
  zs.avail_out = static_cast<uInt>(gz.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) std::abort();
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  if (mode % 3 == 1 && !gz.empty()) {
    gz.resize(gz.size() * (mode / 3) / 85);  // a prefix: 0 .. all of it
  } else if (mode % 3 == 2 && !gz.empty()) {
    gz[(mode / 3 * 7919u) % gz.size()] ^= static_cast<uint8_t>(1u << (mode % 8));
  }
  write_scratch(gz.data(), gz.size());
  read_idx_all();
  return 0;
}

// The input as a safetensors file: loaded into a module with one f32 tensor
// "w" of shape [2] (the path a checkpoint takes), then listed with every byte read.
inline int safetensors(const uint8_t* data, size_t size) {
  write_scratch(data, size);
  try {
    nn::Sequential m;
    Tensor w = m.register_parameter("w", Tensor::zeros({2}));
    nn::load(m, scratch_path(), false);
    (void)w.to_vector<float>();
  } catch (const Error&) {
  }
  try {
    nn::NamedTensors ts = nn::load_tensors(scratch_path());
    for (const auto& [name, t] : ts) {
      // Every byte of every tensor is read: a wrong size shows up under ASan.
      Tensor c = t.contiguous();
      const auto* p = static_cast<const uint8_t*>(c.raw_data());
      uint8_t sum = 0;
      for (int64_t i = 0, n = c.numel() * static_cast<int64_t>(dtype_size(c.dtype())); i < n; ++i) sum ^= p[i];
      volatile uint8_t sink = sum;
      (void)sink;
    }
  } catch (const Error&) {
  }
  return 0;
}

// The input as the .key file of a kernel cache entry beside a small library:
// the check made before a cached library is loaded must give a reason to
// refuse it, unless the file is exactly this entry's (it then holds the key).
inline const std::string kKernelFuzzKey = "volt fuzz key\nint k() { return 1; }\n";
inline std::filesystem::path kernel_fuzz_library() {
  namespace fs = std::filesystem;
  static const fs::path dir = fs::temp_directory_path() / ("volt-fuzz-kernels-" + std::to_string(::getpid()));
  static const fs::path lib = [] {
    fs::create_directories(dir);
    const fs::path p = dir / "cpu_fuzz.so";
    std::FILE* f = std::fopen(p.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + p.string());
    const char bytes[64] = "\x7f" "ELF: 64 bytes standing for a compiled kernel library";
    std::fwrite(bytes, 1, sizeof bytes, f);
    std::fclose(f);
    return p;
  }();
  return lib;
}

inline int kernel_key(const uint8_t* data, size_t size) {
  const std::filesystem::path lib = kernel_fuzz_library();
  std::filesystem::path key = lib;
  key.replace_extension(".key");
  std::FILE* f = std::fopen(key.c_str(), "wb");
  if (!f) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  const std::string problem = jit::kernel_cache_problem(lib, kKernelFuzzKey);
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Accepted only with the whole key at the end of the file.
  if (problem.empty() && (text.size() < kKernelFuzzKey.size() ||
                          text.compare(text.size() - kKernelFuzzKey.size(), kKernelFuzzKey.size(), kKernelFuzzKey) != 0))
    std::abort();
  return 0;
}

}  // namespace volt::fuzz
