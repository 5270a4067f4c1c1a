// safetensors save/load: round trip, the bytes on disk, and every error by message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <volt/nn/sequential.h>
#include <volt/nn/linear.h>
#include <volt/nn/mlp.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/random.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

// A path in the temp folder, removed when the test ends.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& name)
      : path(fs::temp_directory_path() /
             ("volt_test_" + std::to_string(::getpid()) + "_" + name + ".safetensors")) {}
  ~TempFile() { fs::remove(path); }
  std::string str() const { return path.string(); }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given JSON header and `data_bytes` zero bytes after it.
std::string make_file(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\0');
}

}  // namespace

TEST_CASE("save then load restores every parameter") {
  TempFile f("roundtrip");
  manual_seed(1);
  nn::MLP a(6, {5, 3}, true, 0.1);
  nn::save(a, f.str());
  manual_seed(2);
  nn::MLP b(6, {5, 3}, true, 0.1);
  Tensor held = b.parameters()[0];  // an optimizer's handle
  CHECK(held.to_vector<float>() != a.parameters()[0].to_vector<float>());
  nn::load(b, f.str());
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CHECK(pa[i].first == pb[i].first);
    CHECK(pa[i].second.to_vector<float>() == pb[i].second.to_vector<float>());
  }
  CHECK(held.is_same(b.parameters()[0]));  // loaded in place
  CHECK(held.requires_grad());
}

TEST_CASE("the file is safetensors: length, JSON header, aligned little-endian data") {
  TempFile f("layout");
  nn::Linear fc(3, 2);
  nn::save(fc, f.str());
  std::string bytes = read_all(f.str());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + (6 + 2) * 4);
  std::string json = bytes.substr(8, n);
  CHECK(json.rfind("{\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},", 0) == 0);
  CHECK(json.find("\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}") !=
        std::string::npos);
  CHECK(json.find("\"__metadata__\":{\"format\":\"pt\"}") != std::string::npos);
  float w0 = 0;
  std::memcpy(&w0, bytes.data() + 8 + n, 4);
  CHECK(w0 == fc.weight().to_vector<float>()[0]);

  auto loaded = nn::load_tensors(f.str());
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].first == "weight");
  CHECK(loaded[0].second.sizes() == Shape{2, 3});
  CHECK(loaded[1].second.to_vector<float>() == fc.bias().to_vector<float>());
}

TEST_CASE("a hand-written header with spacing, escapes and other dtypes reads back") {
  TempFile f("handmade");
  const std::string json =
      "{ \"__metadata__\" : { \"note\": \"a \\\"quoted\\\" \\u0041\" },\n"
      "  \"x\" : { \"dtype\" : \"I64\", \"shape\" : [ 2 ], \"data_offsets\" : [ 0, 16 ] },\n"
      "  \"flag\": {\"dtype\": \"BOOL\", \"shape\": [], \"data_offsets\": [16, 17]} }";
  std::string bytes = make_file(json, 17);
  int64_t x[2] = {-3, 1LL << 40};
  std::memcpy(bytes.data() + 8 + json.size(), x, 16);
  bytes[8 + json.size() + 16] = 1;
  write_all(f.str(), bytes);
  auto t = nn::load_tensors(f.str());
  REQUIRE(t.size() == 2);
  CHECK(t[0].first == "x");
  CHECK(t[0].second.to_vector<int64_t>() == std::vector<int64_t>{-3, 1LL << 40});
  CHECK(t[1].second.dtype() == DType::b8);
  CHECK(t[1].second.dim() == 0);
}

TEST_CASE("load errors name the file and what is wrong") {
  TempFile f("errors");
  const std::string path = f.str();
  nn::Linear fc(3, 2);

  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(nn::load(fc, path + ".nope"), doctest::Contains("file not found"),
                         volt::Error);
    CHECK_THROWS_WITH_AS(nn::load(fc, path + ".nope"), doctest::Contains(path.c_str()), volt::Error);
  }
  SUBCASE("shorter than the length field") {
    write_all(path, "abc");
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("truncated"), volt::Error);
  }
  SUBCASE("header cut short") {
    nn::save(fc, path);
    write_all(path, read_all(path).substr(0, 40));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("truncated: the header length"),
                         volt::Error);
  }
  SUBCASE("data cut short") {
    nn::save(fc, path);
    std::string bytes = read_all(path);
    write_all(path, bytes.substr(0, bytes.size() - 4));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("truncated: tensor 'bias'"),
                         volt::Error);
  }
  SUBCASE("bad header") {
    write_all(path, make_file("{\"weight\": [1, 2", 0));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("bad header"), volt::Error);
    write_all(path, make_file("[]", 0));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("bad header: not a JSON object"),
                         volt::Error);
    write_all(path, make_file("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("do not hold 8 bytes"), volt::Error);
    write_all(path, make_file("{\"w\": {\"dtype\": \"F8_E4M3\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("unsupported dtype 'F8_E4M3'"),
                         volt::Error);
    write_all(path, make_file("{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 4]}}", 4));
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("non-negative integer"),
                         volt::Error);
  }
  SUBCASE("missing key") {
    nn::save(nn::Linear(3, 2, false), path);
    CHECK_THROWS_WITH_AS(nn::load(fc, path), doctest::Contains("missing tensor 'bias'"),
                         volt::Error);
  }
  SUBCASE("unexpected key, unless not strict") {
    nn::save(fc, path);
    nn::Linear no_bias(3, 2, false);
    CHECK_THROWS_WITH_AS(nn::load(no_bias, path), doctest::Contains("unexpected tensor 'bias'"),
                         volt::Error);
    nn::LoadResult r = nn::load(no_bias, path, /*strict=*/false);
    CHECK(no_bias.weight().to_vector<float>() == fc.weight().to_vector<float>());
    CHECK(r.missing_keys.empty());
    CHECK(r.unexpected_keys == std::vector<std::string>{"bias"});
  }
  SUBCASE("missing keys without strict are returned, the rest is loaded") {
    nn::save_tensors({{"weight", Tensor::ones({2, 3})}}, path);
    nn::LoadResult r = nn::load(fc, path, /*strict=*/false);
    CHECK(r.missing_keys == std::vector<std::string>{"bias"});
    CHECK(r.unexpected_keys.empty());
    CHECK(fc.weight().to_vector<float>() == std::vector<float>(6, 1.0f));
  }
  SUBCASE("every misfit in one error") {
    nn::save_tensors({{"weight", Tensor::zeros({2, 4})}, {"extra", Tensor::zeros({1})}}, path);
    std::string message;
    try {
      nn::load(fc, path);
    } catch (const volt::Error& e) {
      message = e.what();
    }
    CHECK(message.find("3 problems") != std::string::npos);
    CHECK(message.find("tensor 'weight' has shape [2, 4], the module expects [2, 3]") != std::string::npos);
    CHECK(message.find("missing tensor 'bias'") != std::string::npos);
    CHECK(message.find("unexpected tensor 'extra'") != std::string::npos);
  }
  SUBCASE("wrong shape, and nothing changes") {
    nn::save(nn::Linear(4, 2), path);
    auto before = fc.weight().to_vector<float>();
    CHECK_THROWS_WITH_AS(nn::load(fc, path),
                         doctest::Contains("tensor 'weight' has shape [2, 4], the module expects [2, 3]"),
                         volt::Error);
    CHECK(fc.weight().to_vector<float>() == before);
  }
  SUBCASE("wrong dtype") {
    nn::save_tensors({{"weight", Tensor::zeros({2, 3}, DType::f64)}, {"bias", Tensor::zeros({2})}},
                     path);
    CHECK_THROWS_WITH_AS(nn::load(fc, path),
                         doctest::Contains("tensor 'weight' has dtype F64, the module expects F32"),
                         volt::Error);
  }
}

TEST_CASE("a header whose byte count overflows 64 bits is refused, naming the tensor") {
  TempFile f("overflow");
  // 2^62 f32 elements and 2^32 x 2^32 bytes: products that wrap to 0 in 64 bits.
  write_all(f.str(), make_file("{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904], "
                               "\"data_offsets\": [0, 0]}}", 0));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()),
                       doctest::Contains("tensor 'w' shape [4611686018427387904] has more bytes than"),
                       volt::Error);
  write_all(f.str(), make_file("{\"u\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296], "
                               "\"data_offsets\": [0, 0]}}", 0));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()), doctest::Contains(f.str().c_str()), volt::Error);
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()), doctest::Contains("tensor 'u'"), volt::Error);
  // A size that does not fit int64 at all.
  write_all(f.str(), make_file("{\"u\": {\"dtype\": \"U8\", \"shape\": [9223372036854775808], "
                               "\"data_offsets\": [0, 0]}}", 0));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()), doctest::Contains("more bytes than"), volt::Error);
}

TEST_CASE("duplicate names and overlapping data_offsets are refused") {
  TempFile f("dup");
  write_all(f.str(), make_file("{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, "
                               "\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [2, 4]}}", 4));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()), doctest::Contains("the name 'a' appears twice"), volt::Error);
  write_all(f.str(), make_file("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, "
                               "\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [3, 5]}}", 5));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()),
                       doctest::Contains("tensors 'a' [0, 4) and 'b' [3, 5) overlap"), volt::Error);
  // Listed out of order, the same overlap; an empty tensor overlaps nothing.
  write_all(f.str(), make_file("{\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [3, 5]}, "
                               "\"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [1, 1]}, "
                               "\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 5));
  CHECK_THROWS_WITH_AS(nn::load_tensors(f.str()), doctest::Contains("overlap"), volt::Error);
  write_all(f.str(), make_file("{\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [4, 6]}, "
                               "\"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [1, 1]}, "
                               "\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 6));
  CHECK(nn::load_tensors(f.str()).size() == 3);
}

TEST_CASE("F16 and BF16 tensors load as f32 on request, exactly") {
  TempFile f("half");
  // Bit patterns and their values from IEEE 754 binary16 and bfloat16 (the top
  // half of a binary32): normal, subnormal, the largest half, signed zero, inf.
  const uint16_t half[8] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x8000, 0x7C00, 0x3555};
  const float half_value[8] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f, -0.0f, INFINITY, 0.333251953125f};
  const uint16_t bf[3] = {0x3F80, 0xC0A0, 0x0001};
  const float bf_value[3] = {1.0f, -5.0f, 0x1p-133f};
  std::string json = "{\"h\": {\"dtype\": \"F16\", \"shape\": [2, 4], \"data_offsets\": [0, 16]}, "
                     "\"b\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22]}}";
  std::string bytes = make_file(json, 22);
  std::memcpy(bytes.data() + 8 + json.size(), half, 16);
  std::memcpy(bytes.data() + 8 + json.size() + 16, bf, 6);
  write_all(f.str(), bytes);
  auto t = nn::load_tensors(f.str(), /*widen_16bit=*/true);
  REQUIRE(t.size() == 2);
  CHECK(t[0].second.dtype() == DType::f32);
  CHECK(t[0].second.sizes() == Shape{2, 4});
  auto h = t[0].second.to_vector<float>();
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&h[i], &half_value[i], 4) == 0);  // bit for bit, so -0 stays -0
  }
  auto b = t[1].second.to_vector<float>();
  for (int i = 0; i < 3; ++i) CHECK(b[i] == bf_value[i]);

  // Into an f32 module (and an f64 one), converted; not into an integer one.
  std::string json2 = "{\"weight\": {\"dtype\": \"BF16\", \"shape\": [1, 2], \"data_offsets\": [0, 4]}, "
                      "\"bias\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [4, 6]}}";
  std::string bytes2 = make_file(json2, 6);
  const uint16_t vals[3] = {0x3F80, 0xC0A0, 0x3C00};
  std::memcpy(bytes2.data() + 8 + json2.size(), vals, 6);
  write_all(f.str(), bytes2);
  nn::Linear fc(2, 1);
  nn::load(fc, f.str());
  CHECK(fc.weight().to_vector<float>() == std::vector<float>{1.0f, -5.0f});
  CHECK(fc.bias().to_vector<float>() == std::vector<float>{1.0f});
  nn::Sequential m;
  m.register_parameter("weight", Tensor::zeros({1, 2}, DType::f64));
  m.register_buffer("bias", Tensor::zeros({1}, DType::i64));
  CHECK_THROWS_WITH_AS(nn::load(m, f.str()),
                       doctest::Contains("tensor 'bias' has dtype F16, the module expects I64"), volt::Error);
}
