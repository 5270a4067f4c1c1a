// IDX reader: raw and gzip files, and every way a file can be bad.
#include <doctest/doctest.h>

#include <volt/data/idx.h>
#include "idx_files.h"

using namespace volt;
using namespace volt::test;

namespace {
std::vector<uint8_t> iota_bytes(int n) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 20);
  return v;
}
}  // namespace

TEST_CASE("read_idx reads a raw 3-D file") {
  TempDir dir;
  write_raw(dir / "images", idx_bytes({3, 2, 2}, iota_bytes(12)));
  auto a = data::read_idx(dir / "images", 3);
  CHECK(a.dims == std::vector<int64_t>{3, 2, 2});
  CHECK(a.bytes == iota_bytes(12));
  CHECK(a.path == dir / "images");

  Tensor u8 = data::to_tensor(a);
  CHECK(u8.dtype() == DType::u8);
  CHECK(u8.sizes() == Shape{3, 2, 2});
  CHECK(u8.to_vector<uint8_t>() == iota_bytes(12));

  Tensor x = data::images_to_float(a);  // (3, 2, 2) -> (3, 4), / 255
  CHECK(x.dtype() == DType::f32);
  CHECK(x.sizes() == Shape{3, 4});
  auto v = x.to_vector<float>();
  for (int i = 0; i < 12; ++i) CHECK(v[i] == float(i * 20) / 255.0f);
}

TEST_CASE("read_idx reads labels as i64") {
  TempDir dir;
  write_raw(dir / "labels", idx_bytes({4}, {7, 0, 9, 3}));
  auto a = data::read_idx(dir / "labels", 1);
  Tensor y = data::labels_to_int64(a);
  CHECK(y.dtype() == DType::i64);
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9, 3});
  CHECK(contains(error_of([&] { data::images_to_float(a); }), "images need dims (N, R, C)"));
}

TEST_CASE("read_idx reads gzip, by name or by magic bytes") {
  TempDir dir;
  const auto bytes = idx_bytes({3, 2, 2}, iota_bytes(12));
  write_gz(dir / "images.gz", bytes);
  write_gz(dir / "images-without-suffix", bytes);
  for (const char* name : {"images.gz", "images-without-suffix"}) {
    auto a = data::read_idx(dir / name, 3);
    CHECK(a.dims == std::vector<int64_t>{3, 2, 2});
    CHECK(a.bytes == iota_bytes(12));
  }
}

TEST_CASE("read_idx: a missing file names the path") {
  TempDir dir;
  auto msg = error_of([&] { data::read_idx(dir / "nope-idx3-ubyte"); });
  CHECK(contains(msg, "read_idx: " + dir / "nope-idx3-ubyte" + ": no such file"));
  CHECK(contains(error_of([&] { data::read_idx(dir.path.string()); }), "is a directory"));
}

TEST_CASE("read_idx: truncated data says how much the header promised") {
  TempDir dir;
  auto bytes = idx_bytes({3, 2, 2}, iota_bytes(12));
  bytes.resize(bytes.size() - 7);  // 5 of 12 data bytes left
  write_raw(dir / "images", bytes);
  auto msg = error_of([&] { data::read_idx(dir / "images", 3); });
  CHECK(contains(msg, dir / "images"));
  CHECK(contains(msg, "truncated: header says 3x2x2 = 12 bytes of data, file has 5"));

  write_gz(dir / "images.gz", bytes);
  msg = error_of([&] { data::read_idx(dir / "images.gz", 3); });
  CHECK(contains(msg, "truncated: header says 3x2x2 = 12 bytes of data, decompressed file has 5"));
}

TEST_CASE("read_idx: truncated header and a cut-off gzip stream") {
  TempDir dir;
  write_raw(dir / "short", {0, 0, 8});
  CHECK(
      contains(error_of([&] { data::read_idx(dir / "short"); }), "truncated: an IDX file starts"));
  write_raw(dir / "header", {0, 0, 8, 3, 0, 0, 0, 3, 0, 0});
  CHECK(contains(error_of([&] { data::read_idx(dir / "header"); }),
                 "truncated: the header needs 12 bytes of sizes for 3 dims, file has 6"));

  // A gzip file cut in half (an interrupted download).
  std::vector<uint8_t> big(20000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7919 % 251);
  write_gz(dir / "full.gz", idx_bytes({20, 1000}, big));
  const auto size = std::filesystem::file_size(dir / "full.gz");
  std::filesystem::copy_file(dir / "full.gz", dir / "cut.gz");
  std::filesystem::resize_file(dir / "cut.gz", size / 2);
  CHECK(data::read_idx(dir / "full.gz").bytes == big);
  auto msg = error_of([&] { data::read_idx(dir / "cut.gz"); });
  CHECK(contains(msg, dir / "cut.gz"));
  CHECK(
      contains(msg, "truncated: header says 20x1000 = 20000 bytes of data, decompressed file has"));
  CHECK(contains(msg, "(the gzip stream ends early)"));

  // Cut inside the 8-byte trailer: every data byte arrives, the checksum does not.
  std::filesystem::copy_file(dir / "full.gz", dir / "no-trailer.gz");
  std::filesystem::resize_file(dir / "no-trailer.gz", size - 4);
  CHECK(contains(error_of([&] { data::read_idx(dir / "no-trailer.gz"); }),
                 "truncated: the gzip stream ends early, so its checksum cannot be verified"));

  // A damaged CRC-32 in the trailer.
  auto gz = std::filesystem::path(dir / "full.gz");
  std::fstream(gz, std::ios::in | std::ios::out | std::ios::binary).seekp(size - 8).put('\x5a');
  msg = error_of([&] { data::read_idx(gz.string()); });
  CHECK(contains(msg, gz.string() + ": corrupt gzip data: incorrect data check"));
}

TEST_CASE("read_idx: wrong or bad magic numbers") {
  TempDir dir;
  write_raw(dir / "labels", idx_bytes({4}, {1, 2, 3, 4}));
  auto msg = error_of([&] { data::read_idx(dir / "labels", 3); });
  CHECK(contains(msg, dir / "labels"));
  CHECK(contains(msg, "wrong magic number 0x00000801 (a 1-D array), expected 0x00000803 (3-D)"));

  write_raw(dir / "text", {'h', 'e', 'l', 'l', 'o', '\n'});
  CHECK(contains(error_of([&] { data::read_idx(dir / "text"); }),
                 "bad magic number 0x68656c6c: not an IDX file"));

  auto f32 = idx_bytes({1}, {0, 0, 0, 0});
  f32[2] = 0x0D;  // IDX float elements
  write_raw(dir / "floats", f32);
  CHECK(contains(error_of([&] { data::read_idx(dir / "floats"); }),
                 "has element type 0x0d; only u8 (0x08) IDX files are supported"));
}

TEST_CASE("read_idx: bad dims and extra bytes") {
  TempDir dir;
  write_raw(dir / "zero", idx_bytes({3, 0, 2}, {}));
  CHECK(contains(error_of([&] { data::read_idx(dir / "zero"); }), "header has size 0 in dim 1"));

  auto bytes = idx_bytes({2, 2}, {1, 2, 3, 4});
  bytes.insert(bytes.end(), {9, 9, 9});
  write_raw(dir / "extra", bytes);
  auto msg = error_of([&] { data::read_idx(dir / "extra"); });
  CHECK(contains(msg, dir / "extra"));
  CHECK(contains(msg, "3 extra bytes after the 4 bytes of data that the header (2x2) describes"));

  write_gz(dir / "extra.gz", bytes);
  CHECK(contains(error_of([&] { data::read_idx(dir / "extra.gz"); }), "3 extra bytes"));
}

TEST_CASE("read_idx: a file that cannot be read is not called corrupt gzip") {
  // /proc/self/mem opens, but reading offset 0 (never mapped) fails with EIO.
  CHECK_THROWS_WITH_AS(volt::data::read_idx("/proc/self/mem"),
                       doctest::Contains("read_idx: /proc/self/mem: cannot read the file"), volt::Error);
  try {
    volt::data::read_idx("/proc/self/mem");
  } catch (const volt::Error& e) {
    CHECK(std::string(e.what()).find("gzip") == std::string::npos);
  }
}
