#include <volt/data/text.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include <volt/tensor/error.h>

namespace volt::data {

// ---------------------------------------------------------------- ByteTokenizer

Tensor ByteTokenizer::encode(std::string_view text) {
  Tensor t = Tensor::empty({static_cast<int64_t>(text.size())}, DType::i64);
  int64_t* out = t.data_ptr<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return t;
}

std::string ByteTokenizer::decode(const Tensor& tokens) {
  VOLT_CHECK(tokens.defined() && tokens.has_data() && tokens.dim() == 1 && is_integral(tokens.dtype()),
             "ByteTokenizer::decode",
             "expected a 1-D integer tensor of tokens, got "
                 << (tokens.defined() ? tokens.meta_str() : "an undefined tensor"));
  const Tensor t = tokens.to(kCPU).to(DType::i64).contiguous();
  const int64_t* in = t.data_ptr<int64_t>();
  std::string text(static_cast<size_t>(t.numel()), '\0');
  for (int64_t i = 0; i < t.numel(); ++i) {
    VOLT_CHECK(in[i] >= 0 && in[i] < vocab_size, "ByteTokenizer::decode",
               "token " << in[i] << " at index " << i << " is not a byte (expected 0.." << vocab_size - 1 << ")");
    text[static_cast<size_t>(i)] = static_cast<char>(static_cast<unsigned char>(in[i]));
  }
  return text;
}

// ---------------------------------------------------------------- load_text

std::string load_text(const std::string& path, int64_t block) {
  constexpr const char* kOp = "load_text";
  namespace fs = std::filesystem;
  std::error_code ec;
  VOLT_CHECK(fs::exists(path, ec), kOp,
             path << ": no such file (`data/fetch_brown.sh "
                  << (fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : std::string("."))
                  << "` writes the Brown corpus there as brown.txt)");
  VOLT_CHECK(!fs::is_directory(path, ec), kOp, path << " is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, kOp, path << ": cannot open (" << std::strerror(errno) << ")");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  VOLT_CHECK(!in.bad(), kOp, path << ": read error after " << text.size() << " bytes");
  VOLT_CHECK(!text.empty(), kOp, path << " is empty, expected text");
  if (block > 0) {
    const int64_t need = TextWindows::min_bytes(block);
    VOLT_CHECK(static_cast<int64_t>(text.size()) >= need, kOp,
               path << " has " << text.size() << " bytes, too short for one window of " << block
                    << " tokens in both the training and the validation split (needs at least " << need
                    << " bytes); is it truncated?");
  }
  return text;
}

// ---------------------------------------------------------------- TextWindows

int64_t TextWindows::train_bytes(int64_t total) { return total / 10 * 9 + total % 10 * 9 / 10; }

// Each split holds at least block + 1 bytes (a window and its next byte).
// Validation, the smaller split, has n - floor(0.9 n) = ceil(n / 10) bytes.
int64_t TextWindows::min_bytes(int64_t block) { return 10 * block + 1; }

TextWindows::TextWindows(std::string_view text, int64_t block, Split split, uint64_t seed, std::string name)
    : block_(block), split_(split), name_(std::move(name)), rng_(seed) {
  VOLT_CHECK(block > 0, "TextWindows", "block must be positive, got " << block);
  const int64_t total = static_cast<int64_t>(text.size());
  VOLT_CHECK(total >= min_bytes(block), "TextWindows",
             name_ << " has " << total << " bytes, too short for one window of " << block
                   << " tokens in both the training and the validation split (needs at least " << min_bytes(block)
                   << " bytes)");
  const int64_t cut = train_bytes(total);
  offset_ = split == Split::train ? 0 : cut;
  const int64_t length = split == Split::train ? cut : total - cut;
  bytes_.assign(text.substr(static_cast<size_t>(offset_), static_cast<size_t>(length)));
}

// Uniform in [0, num_windows()): the generator's 64-bit outputs, those in the
// incomplete last run of the range rejected, so no start is favoured.
int64_t TextWindows::draw_start() {
  const uint64_t n = static_cast<uint64_t>(num_windows());
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t r = rng_();
  while (r >= limit) r = rng_();
  return static_cast<int64_t>(r % n);
}

TextBatch TextWindows::batch(int64_t batch_size, Device device) {
  VOLT_CHECK(batch_size > 0, "TextWindows::batch", "batch_size must be positive, got " << batch_size);
  Tensor x = Tensor::empty({batch_size, block_}, DType::i64), y = Tensor::empty({batch_size, block_}, DType::i64);
  int64_t* xs = x.data_ptr<int64_t>();
  int64_t* ys = y.data_ptr<int64_t>();
  const auto* b = reinterpret_cast<const unsigned char*>(bytes_.data());
  for (int64_t r = 0; r < batch_size; ++r) {
    const int64_t s = draw_start();
    for (int64_t j = 0; j < block_; ++j) {
      xs[r * block_ + j] = b[s + j];
      ys[r * block_ + j] = b[s + j + 1];
    }
  }
  if (!device.is_cpu()) return {x.to(device), y.to(device)};
  return {x, y};
}

void TextWindows::skip(int64_t batches, int64_t batch_size) {
  VOLT_CHECK(batches >= 0 && batch_size > 0, "TextWindows::skip",
             "expected batches >= 0 and batch_size > 0, got " << batches << " and " << batch_size);
  for (int64_t i = 0; i < batches; ++i)
    for (int64_t r = 0; r < batch_size; ++r) draw_start();
}

TextBatch TextWindows::window(int64_t start) const {
  VOLT_CHECK(start >= 0 && start < num_windows(), "TextWindows::window",
             "start " << start << " is out of range: this split of " << size() << " bytes has windows of " << block_
                      << " tokens starting at 0.." << num_windows() - 1);
  const std::string_view all(bytes_);
  return {ByteTokenizer::encode(all.substr(static_cast<size_t>(start), static_cast<size_t>(block_)))
              .reshape({1, block_}),
          ByteTokenizer::encode(all.substr(static_cast<size_t>(start + 1), static_cast<size_t>(block_)))
              .reshape({1, block_})};
}

std::string brown_root() {
  const char* dir = std::getenv("VOLT_DATA_DIR");
  if (dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/volt/brown";
}

}  // namespace volt::data
