// Text corpora for language models: bytes as tokens, batches of random windows.
//
//   std::string text = volt::data::load_text(volt::data::brown_root() + "/brown.txt");
//   volt::data::TextWindows train(text, /*block=*/128, volt::data::Split::train, /*seed=*/1);
//   auto [x, y] = train.batch(16);   // i64 (16, 128) each; y is x shifted by one byte
//   volt::data::ByteTokenizer::decode(x[0]);  // the 128 bytes of the first window
//
// The first 90 % of the bytes are for training, the last 10 % for validation;
// a window lies inside one of them, never across the boundary.  Window starts
// come from the TextWindows' own generator (std::mt19937_64, reduced the same
// way everywhere), so a seed gives the same batches on every platform and is
// independent of volt::manual_seed.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include <volt/tensor/tensor.h>

namespace volt::data {

// Tokens are bytes: 0..255, one per byte of UTF-8 or ASCII text.
struct ByteTokenizer {
  static constexpr int64_t vocab_size = 256;
  // text -> i64 (n)
  static Tensor encode(std::string_view text);
  // Any 1-D integer tensor of tokens in 0..255, on any device -> the bytes.
  static std::string decode(const Tensor& tokens);
};

enum class Split { train, val };

// The file's bytes.  A missing or unreadable file, an empty one, or (with
// block > 0) one too short for a window of `block` tokens in both splits is a
// volt::Error naming the file.
std::string load_text(const std::string& path, int64_t block = 0);

struct TextBatch {
  Tensor inputs;   // i64 (B, block): bytes s .. s+block-1 of each window
  Tensor targets;  // i64 (B, block): bytes s+1 .. s+block, the next byte of each input
};

class TextWindows {
 public:
  // `name` says where the text came from in errors (a path, "text").
  TextWindows(std::string_view text, int64_t block, Split split, uint64_t seed = 0,
              std::string name = "text");

  // The fewest bytes a text needs for one window in each split.
  static int64_t min_bytes(int64_t block);
  // Where the split begins in the whole text: the first byte of validation is
  // at train_bytes(n) = floor(0.9 n).
  static int64_t train_bytes(int64_t total);

  int64_t block() const { return block_; }
  Split split() const { return split_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }  // bytes in this split
  int64_t offset() const { return offset_; }  // where this split begins in the whole text
  // How many distinct windows there are: starts 0 .. size() - block - 1.
  int64_t num_windows() const { return size() - block_; }
  const std::string& bytes() const { return bytes_; }

  // `batch_size` windows with random starts, on `device`.
  TextBatch batch(int64_t batch_size, Device device = kCPU);
  // The window starting at byte `start` of this split: (1, block) each.
  TextBatch window(int64_t start) const;
  // Advances the generator past `batches` calls of batch(batch_size) without
  // making them: a resumed run draws the batches it would have drawn.
  void skip(int64_t batches, int64_t batch_size);
  // Restarts the generator: the batches that follow are those of a new TextWindows with this seed.
  void seed(uint64_t seed) { rng_.seed(seed); }

 private:
  int64_t draw_start();
  std::string bytes_;
  int64_t block_;
  Split split_;
  int64_t offset_;
  std::string name_;
  std::mt19937_64 rng_;
};

// Where data/fetch_brown.sh puts brown.txt by default: $VOLT_DATA_DIR if set,
// else ~/.cache/volt/brown.
std::string brown_root();

}  // namespace volt::data
