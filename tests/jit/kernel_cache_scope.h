// Helpers of the kernel-cache tests: VOLT_KERNEL_CACHE for a scope with
// std::cerr captured, a fresh private directory, a file's bytes.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

namespace volt::testing {

// Sets VOLT_KERNEL_CACHE for a scope and captures what volt writes to std::cerr.
struct CacheScope {
  std::ostringstream err;
  std::streambuf* old;
  explicit CacheScope(const std::filesystem::path& dir) : old(std::cerr.rdbuf(err.rdbuf())) {
    ::setenv("VOLT_KERNEL_CACHE", dir.c_str(), 1);
  }
  ~CacheScope() {
    std::cerr.rdbuf(old);
    ::unsetenv("VOLT_KERNEL_CACHE");
  }
};

// <tmp>/<prefix><pid>/<name>, empty and private whatever the umask (the cache
// refuses a directory others may write).
inline std::filesystem::path private_test_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / (prefix + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace);
  return d;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace volt::testing
