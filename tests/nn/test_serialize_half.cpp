// safetensors with bf16 and f16 tensors: written and read as BF16 and F16
// without widening, bit for bit, and read by PyTorch where it is installed.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <volt/nn/sequential.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/skip.h"
#include "tests/torch_python.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("volt_test_" + std::to_string(::getpid()) + "_" + name);
}

std::vector<uint16_t> bits(const Tensor& t) {
  Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.raw_data());
  return std::vector<uint16_t>(p, p + c.numel());
}

// Patterns that a widening or a rounding would change: NaN with a payload,
// -0, a subnormal, Inf, the largest finite value.
Tensor special(DType dt) {
  const std::vector<uint16_t> v = dt == kBF16 ? std::vector<uint16_t>{0x7FC1, 0x8000, 0x0001, 0x7F80, 0x7F7F, 0x3EAB}
                                              : std::vector<uint16_t>{0x7E01, 0x8000, 0x0001, 0x7C00, 0x7BFF, 0x3555};
  Tensor t = empty({2, 3}, dt);
  std::memcpy(t.raw_data(), v.data(), 12);
  return t;
}

}  // namespace

TEST_CASE("safetensors: bf16 and f16 are saved as BF16 and F16 and load back bit for bit") {
  const fs::path path = temp_path("half.safetensors");
  manual_seed(4);
  const Tensor b = randn({5, 7}, kBF16), h = randn({3}, kF16), sb = special(kBF16), sh = special(kF16);
  nn::save_tensors({{"b", b}, {"h", h}, {"sb", sb}, {"sh", sh.t()}}, path.string());
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(file.find("\"b\":{\"dtype\":\"BF16\",\"shape\":[5,7]") != std::string::npos);
  CHECK(file.find("\"h\":{\"dtype\":\"F16\",\"shape\":[3]") != std::string::npos);
  // Two bytes per element on disk.
  uint64_t header = 0;
  std::memcpy(&header, file.data(), 8);
  CHECK(file.size() == 8 + header + 2 * (35 + 3 + 6 + 6));
  const auto loaded = nn::load_tensors(path.string());
  REQUIRE(loaded.size() == 4);
  CHECK(loaded[0].second.dtype() == kBF16);
  CHECK(loaded[1].second.dtype() == kF16);
  CHECK(bits(loaded[0].second) == bits(b));
  CHECK(bits(loaded[1].second) == bits(h));
  CHECK(bits(loaded[2].second) == bits(sb));
  CHECK(bits(loaded[3].second) == bits(sh.t()));
  // On request as f32, exactly.
  const auto wide = nn::load_tensors(path.string(), /*widen_16bit=*/true);
  CHECK(wide[0].second.dtype() == kF32);
  CHECK(wide[0].second.to_vector<float>() == b.to(kF32).to_vector<float>());
  // Into a module: a bf16 parameter takes the bits; an f32 one the exact values.
  nn::Sequential m;
  m.register_parameter("b", zeros({5, 7}, kBF16));
  m.register_parameter("h", zeros({3}, kF32));
  m.register_buffer("sb", zeros({2, 3}, kBF16));
  m.register_buffer("sh", zeros({3, 2}, kF16));
  nn::load(m, path.string());
  const auto sd = m.state_dict();
  CHECK(bits(sd[0].second) == bits(b));
  CHECK(sd[1].second.to_vector<float>() == h.to(kF32).to_vector<float>());
  CHECK(bits(sd[2].second) == bits(sb));
  fs::remove(path);
}

TEST_CASE("safetensors: a bf16 file written by volt loads in PyTorch bit for bit") {
  const std::string& python = volt::testing::torch_python();
  if (python.empty()) VOLT_SKIP("no python3 here can import torch");
  const fs::path path = temp_path("torch.safetensors"), script = temp_path("read.py"), out = temp_path("bits.txt");
  manual_seed(5);
  const Tensor b = cat({randn({40}, kBF16), special(kBF16).reshape({6})});
  nn::save_tensors({{"w", b}}, path.string());
  // The file read by PyTorch from the format's definition (no volt code).
  std::ofstream(script) << "import json, struct, sys, torch\n"
                           "raw = open(sys.argv[1], 'rb').read()\n"
                           "n = struct.unpack('<Q', raw[:8])[0]\n"
                           "meta = json.loads(raw[8:8 + n])['w']\n"
                           "a, b = meta['data_offsets']\n"
                           "t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.bfloat16)\n"
                           "assert meta['dtype'] == 'BF16' and list(t.shape) == meta['shape']\n"
                           "open(sys.argv[2], 'w').write(' '.join(str(v & 0xFFFF) for v in t.view(torch.int16).tolist()))\n";
  const std::string cmd = python + " " + script.string() + " " + path.string() + " " + out.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream res(out);
  std::vector<uint16_t> got;
  for (unsigned v; res >> v;) got.push_back(uint16_t(v));
  CHECK(got == bits(b));
  fs::remove(path), fs::remove(script), fs::remove(out);
}
