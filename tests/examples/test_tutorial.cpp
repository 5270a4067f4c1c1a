// The tutorial (docs/tutorial) cannot drift: every chapter program's output
// must equal its pinned output and the block its chapter quotes.  The check
// is docs/tutorial/outputs.sh (run it with --update after an intended change).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>


TEST_CASE("tutorial: every chapter's program prints what its chapter quotes") {
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/docs/tutorial/outputs.sh";
  const std::string log = (std::filesystem::temp_directory_path() / ("volt-tutorial-" + std::to_string(::getpid()) + ".log")).string();
  std::vector<std::string> args = {"/bin/bash", script, VOLT_BUILD_DIR};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  std::ifstream in(log);
  const std::string out(std::istreambuf_iterator<char>(in), {});
  std::filesystem::remove(log);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), out);
  CHECK(out.find("tutorial: 10 chapters match their outputs") != std::string::npos);
}
