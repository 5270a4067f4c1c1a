// The host kernel cache: damaged or mismatched entries are compiled again,
// any directory name works, an unwritable directory falls back.
#include <doctest/doctest.h>

#include "sanitized.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/jit/kernel_cache.h>
#include <volt/tensor/ops.h>

#include "tests/jit/kernel_cache_scope.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

using volt::testing::CacheScope;
using volt::testing::slurp;

fs::path fresh_dir(const std::string& name) { return volt::testing::private_test_dir("volt-test-kcache-", name); }

void spit(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

// Two functions with one fused kernel each; their results by hand.
std::vector<Tensor> f_fn(const std::vector<Tensor>& x) { return {add(mul(exp(x[0]), 3.0), 1.0)}; }
std::vector<Tensor> g_fn(const std::vector<Tensor>& x) { return {sub(mul(x[0], x[0]), 0.25)}; }
std::vector<float> f_want(const std::vector<float>& x) {
  std::vector<float> r;
  for (float v : x) r.push_back(std::exp(v) * 3.0f + 1.0f);
  return r;
}
std::vector<float> g_want(const std::vector<float>& x) {
  std::vector<float> r;
  for (float v : x) r.push_back(v * v - 0.25f);
  return r;
}

// Runs fn jitted (a fresh jit, so its kernel is looked up again) in `dir`.
std::vector<float> run_in(const fs::path& dir, jit::JitFunction::Fn fn, std::string* err = nullptr) {
  CacheScope scope(dir);
  auto jf = jit::jit(fn, {"x"});
  std::vector<float> r = jf(Tensor::from_vector<float>({-1.0f, 0.5f, 2.0f})).to_vector<float>();
  if (err) *err = scope.err.str();
  CHECK(jit::compile_stats(jf).fusions == 1);
  return r;
}

std::vector<fs::path> libraries(const fs::path& dir) {
  std::vector<fs::path> r;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".so") r.push_back(e.path());
  return r;
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("kernel cache: truncated, garbled, zero-length and swapped entries are each compiled again") {
  const std::vector<float> x{-1.0f, 0.5f, 2.0f};
  // The originals: one library for f, one for g, each with its .key file.
  const fs::path base = fresh_dir("base");
  REQUIRE(run_in(base, f_fn) == f_want(x));
  const fs::path f_lib = libraries(base).at(0);
  REQUIRE(run_in(base, g_fn) == g_want(x));
  fs::path g_lib;
  for (const fs::path& p : libraries(base))
    if (p != f_lib) g_lib = p;
  REQUIRE(!g_lib.empty());
  auto key_of = [](fs::path p) { return p.replace_extension(".key"); };
  const std::string f_bytes = slurp(f_lib);
  REQUIRE(f_bytes.size() > 1000);

  // Each damage in a directory of its own: a path this process never loaded.
  struct Damage {
    const char* name;
    std::function<void(const fs::path& dir)> apply;
    const char* expect;  // in the one line that says why
  };
  const std::vector<Damage> damages = {
      {"truncated", [&](const fs::path& d) { spit(d / f_lib.filename(), f_bytes.substr(0, f_bytes.size() / 2)); },
       "is damaged (the library has"},
      {"zero-length", [&](const fs::path& d) { spit(d / f_lib.filename(), ""); }, "is damaged (the library has 0"},
      {"garbled",
       [&](const fs::path& d) {
         std::string b = f_bytes;
         for (size_t i = b.size() / 3; i < b.size() / 3 + 64; ++i) b[i] = static_cast<char>(b[i] ^ 0x5a);
         spit(d / f_lib.filename(), b);
       },
       "the library's contents changed"},
      {"swapped library and key",  // g's entry under f's name
       [&](const fs::path& d) {
         fs::copy_file(g_lib, d / f_lib.filename(), fs::copy_options::overwrite_existing);
         fs::copy_file(key_of(g_lib), key_of(d / f_lib.filename()), fs::copy_options::overwrite_existing);
       },
       "belongs to another kernel"},
      {"swapped library only",
       [&](const fs::path& d) { fs::copy_file(g_lib, d / f_lib.filename(), fs::copy_options::overwrite_existing); },
       "is damaged"},
      {"garbled key file", [&](const fs::path& d) { spit(key_of(d / f_lib.filename()), "volt kernel cache 1\nsize x\n"); },
       "damaged .key file"},
      {"missing key file", [&](const fs::path& d) { fs::remove(key_of(d / f_lib.filename())); }, "has no readable"},
  };
  for (const Damage& dmg : damages) {
    CAPTURE(dmg.name);
    const fs::path d = fresh_dir(std::string("case-") + std::to_string(&dmg - damages.data()));
    for (const auto& e : fs::directory_iterator(base)) fs::copy_file(e.path(), d / e.path().filename());
    dmg.apply(d);
    std::string err;
    CHECK(run_in(d, f_fn, &err) == f_want(x));
    // One line, naming the file and why.
    CHECK(lines(err) == 1);
    CHECK(err.find(f_lib.filename().string()) != std::string::npos);
    CHECK(err.find(dmg.expect) != std::string::npos);
    CHECK(err.find("compiling it again") != std::string::npos);
    // The entry is whole again: the next lookup loads it silently.
    CHECK(slurp(key_of(d / f_lib.filename())) == slurp(key_of(f_lib)));
    CHECK(slurp(d / f_lib.filename()).size() == f_bytes.size());
  }
  fs::remove_all(base.parent_path());
}

TEST_CASE("kernel cache: a good entry loads without a word; every kernel's symbol is named for its key") {
  const fs::path d = fresh_dir("quiet");
  std::string err;
  run_in(d, f_fn, &err);
  CHECK(err.empty());
  const fs::path lib = libraries(d).at(0);
  std::string bytes = slurp(lib);
  // Exported as volt_fused_<hash of the kernel's key>_k<first 16 hex digits of the file's hash>.
  const std::string stem = lib.stem().string();  // cpu_<32 hex>
  const size_t at = bytes.find("_k" + stem.substr(4, 16));
  REQUIRE(at != std::string::npos);
  CHECK(at >= 27);
  CHECK(bytes.compare(at - 27, 11, "volt_fused_") == 0);
  // Its stored key spells out the whole source and toolchain.
  fs::path key = lib;
  std::string meta = slurp(key.replace_extension(".key"));
  CHECK(meta.rfind("volt kernel cache 1\nsize ", 0) == 0);
  CHECK(meta.find("compiler: ") != std::string::npos);
  CHECK(meta.find("flags: -O3") != std::string::npos);
  CHECK(meta.find("VOLT_KERNEL(volt_fused_") != std::string::npos);
  run_in(d, f_fn, &err);  // a fresh jit: found in memory, no message either
  CHECK(err.empty());
  fs::remove_all(d);
}

TEST_CASE("kernel cache: a directory with spaces and shell metacharacters works, and runs nothing") {
  const fs::path root = fresh_dir("meta");
  const fs::path marker = root / "PWNED";
  const fs::path d = root / ("dir with spaces;touch " + marker.string() + ";$(touch " + marker.string() +
                             ")'\"`x` & |");
  std::string err;
  CHECK(run_in(d, g_fn, &err) == g_want({-1.0f, 0.5f, 2.0f}));
  CHECK(err.empty());
  CHECK(libraries(d).size() == 1);
  CHECK(!fs::exists(marker));
  fs::remove_all(root);
}

TEST_CASE("kernel cache: an unwritable cache directory falls back, with a message naming it") {
  const fs::path root = fresh_dir("unwritable");
  spit(root / "a-file", "not a directory");
  const fs::path d = root / "a-file" / "kernels";  // cannot be created, even by root
  std::string err;
  CHECK(run_in(d, f_fn, &err) == f_want({-1.0f, 0.5f, 2.0f}));
  CHECK(err.find("kernel cache directory") != std::string::npos);
  CHECK(err.find(d.string()) != std::string::npos);
  CHECK(err.find("instead") != std::string::npos);
  CHECK(err.find("compiler") == std::string::npos);  // not blamed on the compiler
  fs::remove_all(root);
}

TEST_CASE("kernel cache: a directory where an entry's files should be is a warning, never an abort") {
  const std::vector<float> x{-1.0f, 0.5f, 2.0f};
  const fs::path base = fresh_dir("dir-base");
  REQUIRE(run_in(base, f_fn) == f_want(x));
  const fs::path lib = libraries(base).at(0);
  for (const char* ext : {".so", ".key"}) {
    CAPTURE(ext);
    const fs::path d = fresh_dir(std::string("dir-at-") + (ext + 1));
    fs::path blocked = d / lib.filename();
    blocked.replace_extension(ext);
    fs::create_directories(blocked / "inside");
    std::string err;
    CHECK(run_in(d, f_fn, &err) == f_want(x));
    CHECK(err.find(lib.stem().string()) != std::string::npos);
  }
  fs::remove_all(base.parent_path());
}

TEST_CASE("kernel cache: the fallback directory is used only when private to this user") {
  const fs::path shared = fs::temp_directory_path() / ("volt-kernels-" + std::to_string(::geteuid()));
  const fs::path root = fresh_dir("not-private");
  spit(root / "a-file", "not a directory");
  const fs::path d = root / "a-file" / "kernels";
  // Open to everyone (as another user could have made it): not used.
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all);
  std::string err;
  CHECK(run_in(d, f_fn, &err) == f_want({-1.0f, 0.5f, 2.0f}));
  CHECK(err.find("is not a private directory of this user") != std::string::npos);
  CHECK(err.find("volt-kernels-") != std::string::npos);
  // Private again: used, without that line.
  fs::permissions(shared, fs::perms::owner_all, fs::perm_options::replace);
  CHECK(run_in(d, g_fn, &err) == g_want({-1.0f, 0.5f, 2.0f}));
  CHECK(err.find("is not a private directory") == std::string::npos);
  fs::remove_all(root);
}

// Builds f's kernel in the directory VOLT_TEST_CACHE_CHILD names, as one of
// several processes doing so at once (the case below starts them).
TEST_CASE("kernel cache child: one of several processes building the same new entry" * doctest::skip()) {
  const char* dir = std::getenv("VOLT_TEST_CACHE_CHILD");
  if (!dir) {
    MESSAGE("runs only as a child process of the concurrent-builders case");
    return;
  }
  std::string err;
  const std::vector<float> got = run_in(dir, f_fn, &err), want = f_want({-1.0f, 0.5f, 2.0f});
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  CHECK_MESSAGE(err.empty(), err);  // built or loaded, never "running them prim by prim"
}

TEST_CASE("kernel cache: eight processes building one new entry at once, four rounds, each run the compiled kernel") {
  // Under the sanitizers one round of four (each process is slow to start there).
  const int processes = volt::testing::kSanitized ? 4 : 8, rounds = volt::testing::kSanitized ? 1 : 4;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    const fs::path d = fresh_dir("concurrent" + std::to_string(round));
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("VOLT_TEST_CACHE_CHILD=" + d.string());
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = fs::read_symlink("/proc/self/exe").string(), filter = "-tc=kernel cache child*";
    std::string no_skip = "-ns";
    char* argv[] = {self.data(), no_skip.data(), filter.data(), nullptr};
    std::vector<pid_t> kids;
    for (int k = 0; k < processes; ++k) {
      const std::string log = (d.parent_path() / ("child" + std::to_string(k) + ".log")).string();
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
      pid_t pid = 0;
      REQUIRE(posix_spawn(&pid, self.c_str(), &fa, nullptr, argv, envp.data()) == 0);
      posix_spawn_file_actions_destroy(&fa);
      kids.push_back(pid);
    }
    for (size_t k = 0; k < kids.size(); ++k) {
      int status = 0;
      REQUIRE(::waitpid(kids[k], &status, 0) == kids[k]);
      CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                    "child " << k << ":\n" << slurp(d.parent_path() / ("child" + std::to_string(k) + ".log")));
    }
    CHECK(libraries(d).size() == 1);  // one entry, published whole
    for (const auto& e : fs::directory_iterator(d)) CHECK_MESSAGE(e.path().string().find(".tmp") == std::string::npos, e.path());
    fs::remove_all(d);
  }
}
