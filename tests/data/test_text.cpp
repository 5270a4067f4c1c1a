// Text corpora (data/text.h): the byte tokenizer, TextWindows' splits and
// batches, load_text's errors, and data/fetch_brown.sh's checksum check.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <volt/data/text.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

// 1000 bytes: the 900 of training are lowercase letters a, b, c, ... in turn,
// the 100 of validation uppercase ones, so a window's bytes say which split
// they came from and whether they are consecutive.
std::string letters(int64_t n = 1000) {
  std::string s(static_cast<size_t>(n), ' ');
  const int64_t cut = data::TextWindows::train_bytes(n);
  for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>((i < cut ? 'a' : 'A') + i % 26);
  return s;
}

std::string message(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("ByteTokenizer: every byte round-trips; a token that is not a byte is an error") {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  Tensor t = data::ByteTokenizer::encode(all);
  CHECK(t.dtype() == DType::i64);
  CHECK(t.sizes() == Shape{256});
  CHECK(t.to_vector<int64_t>()[200] == 200);
  CHECK(data::ByteTokenizer::decode(t) == all);
  CHECK(data::ByteTokenizer::vocab_size == 256);
  std::string m = message([] { data::ByteTokenizer::decode(Tensor::from_vector<int64_t>({65, 256})); });
  CHECK(m.find("ByteTokenizer::decode") != std::string::npos);
  CHECK(m.find("token 256 at index 1") != std::string::npos);
  CHECK(message([] { data::ByteTokenizer::decode(Tensor::zeros({2, 2}, DType::i64)); }).find("1-D integer") !=
        std::string::npos);
}

TEST_CASE("TextWindows: 90 % for training, 10 % for validation; windows never cross the split") {
  // 250 bytes, each its position + 1: a window's bytes say where it lies.
  std::string text(250, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i + 1);
  const int64_t block = 8;
  data::TextWindows train(text, block, data::Split::train, 1), val(text, block, data::Split::val, 1);
  CHECK(train.size() == 225);
  CHECK(val.size() == 25);
  CHECK(val.offset() == 225);
  CHECK(train.num_windows() == 217);
  CHECK(val.num_windows() == 17);
  for (auto* w : {&train, &val}) {
    CAPTURE(w == &train);
    const int64_t first = w->offset() + 1, last = w->offset() + w->size();  // the split's first and last byte
    std::set<int64_t> starts;
    bool inside = true, shifted = true;
    for (int draw = 0; draw < 50; ++draw) {
      data::TextBatch b = w->batch(64);
      REQUIRE(b.inputs.sizes() == Shape{64, block});
      REQUIRE(b.targets.sizes() == Shape{64, block});
      CHECK(b.inputs.dtype() == DType::i64);
      CHECK(b.targets.dtype() == DType::i64);
      auto x = b.inputs.to_vector<int64_t>(), y = b.targets.to_vector<int64_t>();
      for (size_t r = 0; r < 64; ++r) {
        starts.insert(x[r * block] - first);
        for (size_t j = 0; j < static_cast<size_t>(block); ++j) {
          const int64_t xi = x[r * block + j], yi = y[r * block + j];
          inside = inside && xi >= first && yi <= last;
          // Consecutive bytes of the text, the targets one further on.
          shifted = shifted && yi == xi + 1 && (j == 0 || xi == x[r * block + j - 1] + 1);
        }
      }
    }
    CHECK(inside);
    CHECK(shifted);
    // Every start is drawn, up to the last one, whose last target is the split's last byte.
    CHECK(starts.size() == static_cast<size_t>(w->num_windows()));
    CHECK(*starts.begin() == 0);
    CHECK(*starts.rbegin() == w->num_windows() - 1);
  }
}

TEST_CASE("TextWindows: window(start) is the text's bytes; the last start ends at the split's last byte") {
  const std::string text = letters();
  data::TextWindows train(text, 8, data::Split::train), val(text, 8, data::Split::val);
  data::TextBatch w = train.window(train.num_windows() - 1);
  CHECK(data::ByteTokenizer::decode(w.inputs.reshape({8})) == text.substr(891, 8));
  CHECK(data::ByteTokenizer::decode(w.targets.reshape({8})) == text.substr(892, 8));
  data::TextBatch v = val.window(0);
  CHECK(data::ByteTokenizer::decode(v.inputs.reshape({8})) == text.substr(900, 8));
  std::string m = message([&] { train.window(train.num_windows()); });
  CHECK(m.find("TextWindows::window") != std::string::npos);
  CHECK(m.find("out of range") != std::string::npos);
}

TEST_CASE("TextWindows: the same seed gives the same batches, another seed others") {
  const std::string text = letters();
  data::TextWindows a(text, 16, data::Split::train, 42), b(text, 16, data::Split::train, 42),
      c(text, 16, data::Split::train, 43);
  data::TextBatch a1 = a.batch(4), a2 = a.batch(4), b1 = b.batch(4), b2 = b.batch(4), c1 = c.batch(4);
  CHECK(a1.inputs.to_vector<int64_t>() == b1.inputs.to_vector<int64_t>());
  CHECK(a2.targets.to_vector<int64_t>() == b2.targets.to_vector<int64_t>());
  CHECK(a1.inputs.to_vector<int64_t>() != a2.inputs.to_vector<int64_t>());
  CHECK(a1.inputs.to_vector<int64_t>() != c1.inputs.to_vector<int64_t>());
  a.seed(42);  // restarted: the first batch again
  CHECK(a.batch(4).inputs.to_vector<int64_t>() == a1.inputs.to_vector<int64_t>());
}

TEST_CASE("TextWindows: skip(n, b) draws what n calls of batch(b) would, and checks its arguments") {
  const std::string text = letters();
  data::TextWindows a(text, 16, data::Split::train, 5), b(text, 16, data::Split::train, 5);
  for (int i = 0; i < 3; ++i) a.batch(4);
  b.skip(3, 4);
  CHECK(a.batch(4).inputs.to_vector<int64_t>() == b.batch(4).inputs.to_vector<int64_t>());
  b.skip(0, 4);  // nothing
  CHECK(a.batch(2).targets.to_vector<int64_t>() == b.batch(2).targets.to_vector<int64_t>());
  CHECK(message([&] { b.skip(-1, 4); }).find("TextWindows::skip") != std::string::npos);
  CHECK(message([&] { b.skip(1, 0); }).find("batch_size > 0") != std::string::npos);
}

TEST_CASE("TextWindows: a text too short for a window in each split is an error naming it") {
  CHECK(data::TextWindows::min_bytes(8) == 81);
  CHECK_NOTHROW(data::TextWindows(letters(81), 8, data::Split::val));
  std::string m = message([] { data::TextWindows(letters(80), 8, data::Split::train, 0, "corpus.txt"); });
  CHECK(m.find("TextWindows") != std::string::npos);
  CHECK(m.find("corpus.txt has 80 bytes") != std::string::npos);
  CHECK(m.find("at least 81 bytes") != std::string::npos);
  CHECK(message([] { data::TextWindows(letters(), 0, data::Split::train); }).find("block must be positive") !=
        std::string::npos);
}

TEST_CASE("load_text: a missing, empty or truncated corpus is an error naming the file") {
  TempDir dir("volt_test_load_text");
  const std::string missing = (dir.path / "brown.txt").string();
  std::string m = message([&] { data::load_text(missing); });
  CHECK(m.find("load_text") != std::string::npos);
  CHECK(m.find(missing + ": no such file") != std::string::npos);
  CHECK(m.find("`data/fetch_brown.sh " + dir.path.string() + "`") != std::string::npos);  // fetches it there
  const std::string empty = dir.write("empty.txt", "");
  CHECK(message([&] { data::load_text(empty); }).find(empty + " is empty") != std::string::npos);
  const std::string truncated = dir.write("short.txt", letters(500));
  m = message([&] { data::load_text(truncated, 128); });
  CHECK(m.find(truncated + " has 500 bytes") != std::string::npos);
  CHECK(m.find("truncated") != std::string::npos);
  CHECK(data::load_text(truncated, 8) == letters(500));
}

TEST_CASE("fetch_brown.sh --check: a wrong brown.txt fails, by size and by SHA-256") {
  TempDir dir("volt_test_fetch_brown");
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/data/fetch_brown.sh";
  auto check = [&] {
    const std::string cmd = "bash '" + script + "' --check '" + dir.path.string() + "' >/dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  CHECK(check() != 0);  // nothing there
  dir.write("brown.txt", "The Fulton County Grand Jury said Friday\n");
  CHECK(check() != 0);  // wrong size
  dir.write("brown.txt", std::string(6127074, 'x'));
  CHECK(check() != 0);  // the right size, the wrong bytes
  // Where the real corpus was fetched, it passes the same check.
  const fs::path real = fs::path(data::brown_root()) / "brown.txt";
  if (fs::exists(real)) {
    const std::string cmd = "bash '" + script + "' --check '" + real.parent_path().string() + "' >/dev/null 2>&1";
    CHECK(std::system(cmd.c_str()) == 0);
    const std::string text = data::load_text(real.string(), 128);
    CHECK(text.size() == 6127074);
    CHECK(text.rfind("The Fulton County Grand Jury said Friday an investigation of Atlanta's", 0) == 0);
  } else {
    MESSAGE("the Brown corpus is not in " << data::brown_root() << " (data/fetch_brown.sh): its own check skipped");
  }
}
