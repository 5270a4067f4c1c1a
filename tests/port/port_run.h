// Running a ported program inside the test binary and reading what it prints:
// its standard output captured through a file, the losses of its "step S ...
// loss L" lines, the LibTorch original built by compile_libtorch.sh, and the
// raw f32 weight file both programs start from.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "data/idx_files.h"

namespace volt::test::port {

// What the program prints on standard output (both std::cout and printf) while
// `run` runs, through a file that stands in for descriptor 1; an exception's
// message is appended and `rc` set to -1.
inline std::string captured_stdout(const TempDir& dir, const std::function<int()>& run, int& rc) {
  const std::string path = dir / "stdout.txt";
  std::cout.flush();
  std::fflush(stdout);
  const int saved = dup(1);
  FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 1);
  std::string error;
  try {
    rc = run();
  } catch (const std::exception& e) {
    rc = -1;
    error = std::string("exception: ") + e.what() + "\n";
  }
  std::cout.flush();
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  std::fclose(file);
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {}) + error;
}

// The numbers after " loss " on the lines that start with "<prefix> ", in order.
inline std::vector<double> losses(const std::string& out, const std::string& prefix = "step") {
  std::vector<double> result;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix + " ", 0) != 0) continue;
    const size_t at = line.find(" loss ");
    if (at != std::string::npos) result.push_back(std::atof(line.c_str() + at + 6));
  }
  return result;
}

// The number after the first "<key> " in the output, or -1 where there is none.
inline double value_after(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  return at == std::string::npos ? -1 : std::atof(out.c_str() + at + key.size() + 1);
}

// Calls a program's renamed main with these arguments after its name.
inline int run_main(int (*main_fn)(int, char**), const char* name, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>(name)};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return main_fn(static_cast<int>(argv.size()) - 1, argv.data());
}

// The LibTorch original `name` built from the current source (the path in
// `env_var`, or compile_libtorch.sh's folder), or "" when there is none or it
// is older than tests/port/libtorch/<name>.cpp.
inline std::string libtorch_binary(const char* env_var, const std::string& name) {
  const char* given = std::getenv(env_var);
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path binary =
      given ? std::filesystem::path(given) : std::filesystem::path(tmp ? tmp : "/tmp") / "volt-port-libtorch" / name;
  const std::filesystem::path source = std::filesystem::path(VOLT_SOURCE_DIR) / "tests/port/libtorch" / (name + ".cpp");
  std::error_code ec;
  if (!std::filesystem::exists(binary, ec)) return "";
  if (std::filesystem::last_write_time(binary, ec) < std::filesystem::last_write_time(source, ec)) return "";
  return binary.string();
}

// Runs a shell command and returns what it printed (standard output and
// error); `rc` is pclose's status.
inline std::string command_output(const std::string& command, int& rc) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  rc = pclose(pipe);
  return out;
}

// A model's parameters in named_parameters() order, as raw f32: the file both
// a port and its LibTorch original load their weights from.
template <class Model>
void write_weights(Model& model, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  for (const auto& p : model.named_parameters()) {
    const std::vector<float> v = p.value().contiguous().template to_vector<float>();
    file.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
}

}  // namespace volt::test::port
