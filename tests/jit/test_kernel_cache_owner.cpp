// The kernel cache trusts only this user's files: a planted link is never
// followed, a directory others may write is refused, an entry that is a link,
// a directory or another user's file is built again.  The report's Graphviz
// scratch files likewise follow no planted link.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <volt/jit/inspect/dot.h>
#include <volt/jit/jit.h>
#include <volt/jit/kernel_cache.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>

#include "cuda/skip_without_gpu.h"
#include "tests/jit/kernel_cache_scope.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

const uid_t kNobody = 65534;

using volt::testing::CacheScope;
using volt::testing::slurp;

fs::path root_dir() { return fs::temp_directory_path() / ("volt-test-kowner-" + std::to_string(::getpid())); }

fs::path fresh_dir(const std::string& name) { return volt::testing::private_test_dir("volt-test-kowner-", name); }


// One fused kernel, exp(x) * 3 + 1, whose values are known by hand.
std::vector<Tensor> f_fn(const std::vector<Tensor>& x) { return {add(mul(exp(x[0]), 3.0), 1.0)}; }
const std::vector<float> kX{-1.0f, 0.5f, 2.0f};
bool right(const std::vector<float>& got) {
  for (size_t i = 0; i < kX.size(); ++i)
    if (std::abs(got[i] - (std::exp(kX[i]) * 3.0f + 1.0f)) > 1e-5f) return false;
  return got.size() == kX.size();
}

// Runs f jitted afresh with the cache in `dir`; what volt said goes to `err`,
// the directory the cache used to `used`.
std::vector<float> run_in(const fs::path& dir, std::string* err, fs::path* used = nullptr) {
  CacheScope scope(dir);
  auto jf = jit::jit(f_fn, {"x"});
  std::vector<float> r = jf(Tensor::from_vector<float>(kX)).to_vector<float>();
  if (used) *used = jit::kernel_cache_dir();
  *err = scope.err.str();
  CHECK(jit::compile_stats(jf).fusions == 1);
  return r;
}

fs::path library_in(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".so") return e.path();
  return {};
}

bool is_private(const fs::path& d) {
  struct stat st {};
  return ::stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

}  // namespace

TEST_CASE("kernel cache: links planted at the probe, log, temporary and entry paths are never followed") {
  std::string err;
  const fs::path base = fresh_dir("base");
  REQUIRE(right(run_in(base, &err)));
  const fs::path lib = library_in(base);
  REQUIRE(!lib.empty());
  const std::string stem = lib.stem().string(), pid = std::to_string(::getpid());
  const fs::path victim = root_dir() / "victim";
  std::ofstream(victim) << "precious";
  const fs::path d = fresh_dir("planted");
  // Every name a build in `d` could foresee, each a link to the victim.
  for (const std::string& name : {".probe" + pid, stem + ".log.tmp" + pid, stem + ".so.tmp" + pid,
                                  stem + ".key.tmp" + pid, stem + ".tmp" + pid + ".cpp"})
    fs::create_symlink(victim, d / name);
  CHECK(right(run_in(d, &err)));
  CHECK(slurp(victim) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(d / lib.filename())));

  // A link at the entry itself, to a good library and with its good .key, is
  // not loaded: the entry is built again beside it.
  const fs::path e = fresh_dir("linked-entry");
  const fs::path elsewhere = root_dir() / "elsewhere.so";
  fs::copy_file(lib, elsewhere, fs::copy_options::overwrite_existing);
  fs::create_symlink(elsewhere, e / lib.filename());
  fs::copy_file(fs::path(lib).replace_extension(".key"), e / (stem + ".key"));
  CHECK(right(run_in(e, &err)));
  CHECK(err.find("symbolic link") != std::string::npos);
  CHECK(err.find("compiling it again") != std::string::npos);
  CHECK(fs::is_regular_file(fs::symlink_status(e / lib.filename())));
  CHECK(slurp(elsewhere) == slurp(lib));  // the link's target untouched
  fs::remove_all(root_dir());
}

TEST_CASE("kernel cache: a cache directory its group or others may write is refused for a private one") {
  int n = 0;
  for (fs::perms mode : {fs::perms::all, fs::perms::owner_all | fs::perms::group_all}) {
    const fs::path d = fresh_dir("open" + std::to_string(n++));  // (one message per directory)
    fs::permissions(d, mode, fs::perm_options::replace);
    std::string err;
    fs::path used;
    CHECK(right(run_in(d, &err, &used)));
    CHECK(err.find("writable by its group or others") != std::string::npos);
    CHECK(err.find(d.string()) != std::string::npos);
    CHECK(library_in(d).empty());  // nothing written there
    CHECK(used != d);
    CHECK(is_private(used));
  }
  // A new directory is made 0700.
  const fs::path made = root_dir() / "new" / "kernels";
  std::string err;
  fs::path used;
  CHECK(right(run_in(made, &err, &used)));
  CHECK(used == made);
  CHECK((fs::status(made).permissions() & fs::perms::mask) == fs::perms::owner_all);
  fs::remove_all(root_dir());
}

TEST_CASE("kernel cache: a directory at an entry's .so or .key path is replaced by a rebuilt entry") {
  std::string err;
  const fs::path base = fresh_dir("dir-base");
  REQUIRE(right(run_in(base, &err)));
  const fs::path lib = library_in(base);
  for (const char* ext : {".so", ".key"}) {
    CAPTURE(ext);
    const fs::path d = fresh_dir(std::string("dir-at-") + (ext + 1));
    fs::path blocked = d / lib.filename();
    blocked.replace_extension(ext);
    fs::create_directories(blocked / "inside");
    CHECK(right(run_in(d, &err)));
    CHECK(err.find("compiling it again") != std::string::npos);
    CHECK(fs::is_regular_file(fs::symlink_status(d / lib.filename())));
    CHECK(slurp(fs::path(d / lib.filename()).replace_extension(".key")) ==
          slurp(fs::path(lib).replace_extension(".key")));
    CHECK(right(run_in(d, &err)));  // and the rebuilt entry loads silently
    CHECK(err.empty());
  }
  fs::remove_all(root_dir());
}

TEST_CASE("kernel cache: another user's cache directory or library is never used (runs as root)") {
  if (::geteuid() != 0) {
    VOLT_SKIP("needs root to give files to another user (uid 65534)");
  }
  std::string err;
  const fs::path base = fresh_dir("owner-base");
  REQUIRE(right(run_in(base, &err)));
  const fs::path lib = library_in(base);
  // The directory belongs to nobody (mode 0700: only its owner may write).
  const fs::path theirs = fresh_dir("theirs");
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  fs::path used;
  CHECK(right(run_in(theirs, &err, &used)));
  CHECK(err.find("is owned by uid 65534") != std::string::npos);
  CHECK(used != theirs);
  CHECK(is_private(used));
  // A good entry whose library belongs to nobody, in a directory of ours.
  const fs::path d = fresh_dir("their-library");
  for (const auto& e : fs::directory_iterator(base)) fs::copy_file(e.path(), d / e.path().filename());
  REQUIRE(::chown((d / lib.filename()).c_str(), kNobody, kNobody) == 0);
  CHECK(right(run_in(d, &err)));
  CHECK(err.find("owned by uid 65534") != std::string::npos);
  CHECK(err.find("compiling it again") != std::string::npos);
  struct stat st {};
  REQUIRE(::lstat((d / lib.filename()).c_str(), &st) == 0);
  CHECK(st.st_uid == ::geteuid());
  fs::remove_all(root_dir());
}

TEST_CASE("dot: the SVG's scratch files follow no link planted in the temporary directory") {
  if (!jit::graphviz_available()) {
    VOLT_SKIP("Graphviz's dot is not installed");
  }
  fs::create_directories(root_dir());
  const fs::path victim = root_dir() / "victim";
  std::ofstream(victim) << "precious";
  // The names a scratch file could have had: volt-dot-<pid>-<n>.{dot,svg,log}.
  std::vector<fs::path> planted;
  for (int n = 0; n < 64; ++n)
    for (const char* ext : {".dot", ".svg", ".log"}) {
      planted.push_back(fs::temp_directory_path() /
                        ("volt-dot-" + std::to_string(::getpid()) + "-" + std::to_string(n) + ext));
      fs::remove(planted.back());
      fs::create_symlink(victim, planted.back());
    }
  std::string error;
  const std::string svg = jit::dot_to_svg("digraph { a -> b }", &error);
  CHECK_MESSAGE(svg.find("<svg") != std::string::npos, error);
  CHECK(slurp(victim) == "precious");
  for (const fs::path& p : planted) fs::remove(p);
  fs::remove_all(root_dir());
}

TEST_CASE("cuda: the CUDA kernel cache reads no link and writes through none") {
  SKIP_WITHOUT_GPU();
  const fs::path d = fresh_dir("cuda");
  const fs::path victim = root_dir() / "victim", victim2 = root_dir() / "victim2";
  std::ofstream(victim) << "precious";
  std::ofstream(victim2) << "precious";
  // A source no other case compiles (so it is not in memory already).
  const std::string source = cuda::prelude() + "// " + std::to_string(::getpid()) +
                             "\nextern \"C\" __global__ void volt_owner_probe(float* x) { x[0] = 1; }\n";
  const cuda::CacheEntry entry = cuda::cache_entry(source, cuda::compute_capability(0));
  fs::create_symlink(victim, d / entry.file);  // read as an image, it would fail to load...
  fs::create_symlink(victim2, d / (entry.file + ".tmp" + std::to_string(::getpid())));  // ...and be rewritten here
  {
    CacheScope scope(d);
    CHECK(cuda::get_kernel(source, "volt_owner_probe", 0) != nullptr);
  }
  CHECK(slurp(victim) == "precious");
  CHECK(slurp(victim2) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(d / entry.file)));
  fs::remove_all(root_dir());
}
