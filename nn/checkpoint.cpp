#include <volt/nn/checkpoint.h>

#include <filesystem>
#include <fstream>

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
    at.epoch = trainer.at("epoch").get<int64_t>();
    at.step = trainer.at("step").get<int64_t>();
    rng.seed = trainer.at("rng_seed").get<uint64_t>();
    rng.offset = trainer.at("rng_offset").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("load_checkpoint: " + json_path.string() + " lacks a field or has one of the wrong type: " + e.what());
  }
  VOLT_CHECK(at.epoch >= 1 && at.step >= 0, "load_checkpoint",
             json_path.string() << ": epoch " << at.epoch << " and step " << at.step << " are out of range");
  load(module, (root / "model.safetensors").string(), /*strict=*/true);
  optimizer.load_state_dict(load_tensors((root / "optimizer.safetensors").string()));
  set_rng_state(rng);
  return at;
}

}  // namespace volt::nn
