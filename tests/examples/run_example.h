// Runs a program of examples/ as a user runs it (from the build tree), or any
// command, its standard output and error together.
#pragma once
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace volt::testing {

struct ExampleRun {
  int status = -1;  // the exit status; -1 when it did not exit normally
  std::string out;
};

// A shell command's output (stdout and stderr) and exit status.
inline ExampleRun run_command(const std::string& command) {
  ExampleRun r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// `command`: the example's name and its arguments ("gpt --steps 2").
inline ExampleRun run_example(const std::string& command) {
  return run_command(std::string(VOLT_EXAMPLES_BIN_DIR) + "/" + command);
}

// A folder holding a brown.txt of a few kilobytes of English-like text (60
// lines), enough for gpt's windows of 128 in both splits; `name` and the pid
// make it this run's own.
inline std::filesystem::path small_text_corpus(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / (name + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "brown.txt");
  for (int i = 0; i < 60; ++i)
    out << "The Fulton County Grand Jury said Friday an investigation of recent primary election produced no evidence "
        << i << " .\n";
  return dir;
}

}  // namespace volt::testing
