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

TEST_CASE("fuzz corpus: the seeds themselves read as intended") {
  // A replay that silently read nothing would pass above; the seeds are valid files.
  const fs::path st = kFuzzDir / "corpus" / "safetensors" / "w_f16";
  auto t = volt::nn::load_tensors(st.string());
  REQUIRE(t.size() == 1);
  CHECK(t[0].second.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  auto a = volt::data::read_idx((kFuzzDir / "corpus" / "idx_raw" / "labels_5.gz").string(), 1);
  CHECK(a.bytes == std::vector<uint8_t>{0, 1, 2, 9, 7});
}
