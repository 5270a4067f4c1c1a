// Writing small IDX files for the data tests, so they never need the real MNIST.
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <volt/tensor/error.h>

namespace volt::test {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("volt_data_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The header (magic 0x000008NN, then big-endian u32 dims) followed by `values`.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& values) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

inline void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// The message of the volt::Error that f throws, or "" if it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const volt::Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace volt::test
