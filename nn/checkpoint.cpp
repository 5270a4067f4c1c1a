#include <volt/nn/checkpoint.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include <volt/nn/serialize.h>
#include <volt/tensor/error.h>
#include <volt/tensor/random.h>

namespace volt::nn {
namespace fs = std::filesystem;

namespace {

// Writes through a temporary name beside the file, then renames it into place.
template <class Write>
void write_atomically(const fs::path& path, Write write) {
  fs::path tmp = path;
  tmp += ".partial";
  write(tmp.string());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  VOLT_CHECK(!ec, "save_checkpoint", "cannot move " << tmp.string() << " to " << path.string() << ": " << ec.message());
}

// A field that must be a whole number in range: JSON's 1.9, 1e30 or -1 for
// a count would otherwise be truncated or wrapped by the conversion.
template <class Int>
Int whole_field(const nlohmann::json& j, const char* name, const fs::path& path, Int least) {
  const nlohmann::json& v = j.at(name);
  const bool fits = std::is_signed_v<Int> ? v.is_number_integer() : v.is_number_unsigned();
  VOLT_CHECK(fits && v.get<Int>() >= least, "load_checkpoint",
             path.string() << ": " << name << " must be a whole number >= " << least << ", got " << v.dump());
  return v.get<Int>();
}

// A file's fingerprint: its size and FNV-1a hash, as "<bytes>:<hex>".
// trainer.json, written last, holds the other files' fingerprints, so a
// checkpoint torn by a crash between two renames (a new model beside an old
// optimizer file) is refused when loaded instead of resuming a mixed run.
std::string fingerprint(const fs::path& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), op, "cannot read " << path.string());
  uint64_t h = 1469598103934665603ull, n = 0;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
    n += static_cast<uint64_t>(in.gcount());
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(n) + ":" + hex;
}

const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors"};

}  // namespace

void save_checkpoint(const std::string& dir, const Module& module, const Optimizer& optimizer,
                     const TrainingPosition& position) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VOLT_CHECK(!ec, "save_checkpoint", "cannot create the folder " << dir << ": " << ec.message());
  const fs::path root(dir);
  write_atomically(root / "model.safetensors", [&](const std::string& p) { save(module, p); });
  write_atomically(root / "optimizer.safetensors", [&](const std::string& p) {
    NamedTensors state = optimizer.state_dict();
    for (auto& [name, t] : state) t = t.to(kCPU);
    save_tensors(state, p);
  });
  const PhiloxState rng = rng_state();
  nlohmann::json trainer = {{"format", "volt checkpoint 1"},
                            {"epoch", position.epoch},
                            {"step", position.step},
                            {"rng_seed", rng.seed},
                            {"rng_offset", rng.offset},
                            {"lr", optimizer.lr()}};
  for (const char* f : kFiles) trainer["files"][f] = fingerprint(root / f, "save_checkpoint");
  write_atomically(root / "trainer.json", [&](const std::string& p) {
    std::ofstream out(p);
    out << trainer.dump(2) << "\n";
    VOLT_CHECK(out.good(), "save_checkpoint", "cannot write " << p);
  });
}

TrainingPosition load_checkpoint(const std::string& dir, Module& module, Optimizer& optimizer) {
  const fs::path root(dir);
  const fs::path json_path = root / "trainer.json";
  std::ifstream in(json_path);
  VOLT_CHECK(in.good(), "load_checkpoint", "cannot read " << json_path.string() << " (is " << dir
                                                          << " a folder written by save_checkpoint?)");
  nlohmann::json trainer;
  try {
    trainer = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("load_checkpoint: " + json_path.string() + " is not valid JSON: " + e.what());
  }
  TrainingPosition at;
  PhiloxState rng;
  try {
    VOLT_CHECK(trainer.at("format") == "volt checkpoint 1", "load_checkpoint",
               json_path.string() << ": unknown format " << trainer.at("format").dump());
    at.epoch = whole_field<int64_t>(trainer, "epoch", json_path, 1);
    at.step = whole_field<int64_t>(trainer, "step", json_path, 0);
    rng.seed = whole_field<uint64_t>(trainer, "rng_seed", json_path, 0);
    rng.offset = whole_field<uint64_t>(trainer, "rng_offset", json_path, 0);
  } catch (const nlohmann::json::exception& e) {
    throw Error("load_checkpoint: " + json_path.string() + " lacks a field or has one of the wrong type: " + e.what());
  }
  // The files must be the ones trainer.json was saved with (checkpoints
  // written before fingerprints were kept have none to compare).
  if (trainer.contains("files"))
    for (const char* f : kFiles) {
      const nlohmann::json& want = trainer["files"].contains(f) ? trainer["files"][f] : nlohmann::json();
      const std::string got = fingerprint(root / f, "load_checkpoint");
      VOLT_CHECK(want.is_string() && want.get<std::string>() == got, "load_checkpoint",
                 (root / f).string() << " is not the file " << json_path.string()
                                     << " was saved with (a torn or mixed checkpoint): its fingerprint is " << got
                                     << ", recorded " << want.dump());
    }
  // Everything is read and checked before anything is assigned: a damaged or
  // out-of-range optimizer file leaves the model and the optimizer as they
  // were, and load() changes the module only when the whole file fits it.
  NamedTensors optimizer_state = load_tensors((root / "optimizer.safetensors").string());
  optimizer.check_state_dict(optimizer_state);
  load(module, (root / "model.safetensors").string(), /*strict=*/true);
  optimizer.load_state_dict(optimizer_state);
  set_rng_state(rng);
  return at;
}

}  // namespace volt::nn
