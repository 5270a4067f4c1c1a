// Every input in tests/fuzz/corpus (the seeds) and tests/fuzz/crashes (what
// libFuzzer found, kept after the fix) goes through its fuzz target again in
// every test run: each must load or fail with a volt::Error, nothing else.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/targets.h"

namespace {

namespace fs = std::filesystem;

// VOLT_TEST_DATA_DIR is tests/golden; the fuzz folder is its sibling.
const fs::path kFuzzDir = fs::path(VOLT_TEST_DATA_DIR).parent_path() / "fuzz";

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string read_file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `target` on every file under corpus/<name> and crashes/<name>; returns how many.
int replay(const std::string& name, int (*target)(const uint8_t*, size_t)) {
  int n = 0;
  for (const char* kind : {"corpus", "crashes"}) {
    const fs::path dir = kFuzzDir / kind / name;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().filename().string()[0] == '.') continue;
      CAPTURE(entry.path().string());
      std::vector<uint8_t> bytes = read_bytes(entry.path());
      CHECK_NOTHROW(target(bytes.data(), bytes.size()));
      ++n;
    }
  }
  std::remove(volt::fuzz::scratch_path().c_str());
  return n;
}

}  // namespace

TEST_CASE("fuzz corpus: IDX files, raw") { CHECK(replay("idx_raw", volt::fuzz::idx_raw) >= 4); }
TEST_CASE("fuzz corpus: IDX files through gzip") { CHECK(replay("idx_gzip", volt::fuzz::idx_gzip) >= 5); }
TEST_CASE("fuzz corpus: safetensors files") { CHECK(replay("safetensors", volt::fuzz::safetensors) >= 4); }

TEST_CASE("fuzz corpus: kernel cache .key files") { CHECK(replay("kernel_key", volt::fuzz::kernel_key) >= 4); }

TEST_CASE("fuzz target kernel_key: the exact entry passes, each damage is refused with its reason") {
  // So that the target above can tell a refusal from an acceptance at all.
  namespace jit = volt::jit;
  const fs::path lib = volt::fuzz::kernel_fuzz_library();
  const std::string bytes = read_file_text(lib);
  char hash[32];
  std::snprintf(hash, sizeof hash, "%llx", (unsigned long long)jit::hash_bytes(bytes.data(), bytes.size()));
  const std::string& key = volt::fuzz::kKernelFuzzKey;
  const std::string good = "volt kernel cache 1\nsize " + std::to_string(bytes.size()) + "\nxxh3 " + hash + "\nkey " +
                           std::to_string(key.size()) + "\n" + key;
  auto problem = [&](const std::string& text) {
    volt::fuzz::kernel_key(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    return jit::kernel_cache_problem(lib, key);
  };
  CHECK(problem(good) == "");
  CHECK(problem(good.substr(0, good.size() - 3)).find("cut short") != std::string::npos);
  CHECK(problem("volt kernel cache 0" + good.substr(19)).find("another format") != std::string::npos);
  std::string other = good;
  other[other.size() - 2] = '2';
  CHECK(problem(other).find("another kernel") != std::string::npos);
  std::string bad_size = good;
  bad_size.replace(bad_size.find("size 64"), 7, "size 65");
  CHECK(problem(bad_size).find("65 were stored") != std::string::npos);
  CHECK(problem("").find("another format") != std::string::npos);
}

TEST_CASE("fuzz corpus: the seeds themselves read as intended") {
  // A replay that silently read nothing would pass above; the seeds are valid files.
  const fs::path st = kFuzzDir / "corpus" / "safetensors" / "w_f16";
  auto t = volt::nn::load_tensors(st.string());
  REQUIRE(t.size() == 1);
  CHECK(t[0].second.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  auto a = volt::data::read_idx((kFuzzDir / "corpus" / "idx_raw" / "labels_5.gz").string(), 1);
  CHECK(a.bytes == std::vector<uint8_t>{0, 1, 2, 9, 7});
}
