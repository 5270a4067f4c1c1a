#include <volt/jit/kernel_cache.h>
#include <volt/tensor/private_files.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include <xxhash.h>

extern char** environ;

namespace volt::jit {

namespace fs = std::filesystem;

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed) { return XXH3_64bits_withSeed(data, size, seed); }

namespace {

const char* kMagic = "volt kernel cache 1";
const std::vector<std::string> kFlags = {"-O3",       "-march=native", "-ffp-contract=off", "-fno-math-errno",
                                         "-fopenmp",  "-shared",       "-fPIC"};

std::string compiler() {
  if (const char* e = std::getenv("VOLT_CXX")) return e;
#ifdef VOLT_CXX_COMPILER
  return VOLT_CXX_COMPILER;
#else
  return "c++";
#endif
}

// What else decides the bytes of a compiled kernel besides its source and
// flags: the compiler itself (its resolved file, size and date, looked at on
// every compile, so that an upgrade builds afresh) and, because of
// -march=native, this machine's CPU (its model and feature flags, read once,
// so that a cache shared between machines never loads code for another CPU).
std::string toolchain_identity(const std::string& cxx) {
  static const std::string cpu = [] {
    std::string id;
    std::ifstream cpuinfo("/proc/cpuinfo");
    bool model = false, flags = false;
    for (std::string line; (!model || !flags) && std::getline(cpuinfo, line);) {
      if (!model && line.rfind("model name", 0) == 0) id += "cpu: " + line + "\n", model = true;
      if (!flags && line.rfind("flags", 0) == 0) id += "cpu: " + line + "\n", flags = true;
    }
    return id;
  }();
  std::string id = "compiler: " + cxx + "\n";
  fs::path path = cxx;
  if (!path.has_parent_path())
    if (const char* env_path = std::getenv("PATH")) {
      std::istringstream dirs(env_path);
      for (std::string d; std::getline(dirs, d, ':');)
        if (!d.empty() && fs::exists(fs::path(d) / cxx)) {
          path = fs::path(d) / cxx;
          break;
        }
    }
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (!ec) {
    auto size = fs::file_size(real, ec);
    auto when = fs::last_write_time(real, ec).time_since_epoch().count();
    id += "compiler file: " + real.string() + " " + std::to_string(size) + " bytes, modified " +
          std::to_string(when) + "\n";
  }
  return id + cpu;
}

std::string hex128(const std::string& s) {
  XXH128_hash_t h = XXH3_128bits(s.data(), s.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

// False for anything but a regular file of this user, read without following
// a link: a directory, a device, a link or another user's file where an entry
// should be is a damaged entry (rebuilt or run unfused), never an exception.
bool read_file(const fs::path& p, std::string* out, std::string* why = nullptr) {
  return read_own_file(p, out, why);
}

// Whether `dir` is a private directory of this user in which files can be made
// (a probe file under a fresh name, O_EXCL, never through a planted link).
bool usable_dir(const fs::path& dir, std::string* why) {
  if (!private_dir(dir, why)) return false;
  const fs::path probe_dir = make_private_temp_dir(dir, ".probe" + std::to_string(::getpid()) + "-");
  if (probe_dir.empty()) {
    *why = std::string("cannot be written: ") + std::strerror(errno);
    return false;
  }
  std::error_code ec;
  fs::remove(probe_dir, ec);
  return true;
}

// A fresh private directory from mkdtemp, made once per process: where the
// cache goes when neither the chosen directory nor the shared fallback is
// private to this user.
const fs::path& own_temp_dir() {
  static const fs::path own = make_private_temp_dir(fs::temp_directory_path(), "volt-kernels-");
  return own;
}

// The fallback when the chosen directory cannot be used:
// /tmp/volt-kernels-<uid>, made 0700, and used only when it is a directory
// this user owns that no one else may write (another user could otherwise
// plant a library there); else a fresh private directory from mkdtemp.
fs::path private_fallback_dir() {
  const fs::path shared = fs::temp_directory_path() / ("volt-kernels-" + std::to_string(::geteuid()));
  std::string why;
  if (usable_dir(shared, &why)) return shared;
  static bool told = false;
  if (!told)
    std::cerr << "volt: " << shared << " is not a private directory of this user (it " << why << "); using "
              << own_temp_dir() << "\n";
  told = true;
  return own_temp_dir();
}

std::mutex g_mutex;  // guards everything below and serialises compiles

fs::path resolve_dir() {
  const char* home = std::getenv("HOME");
  const char* env = std::getenv("VOLT_KERNEL_CACHE");
  fs::path dir = env && *env ? fs::path(env) : fs::path(home && *home ? home : "/tmp") / ".cache/volt/kernels";
  std::string why;
  if (usable_dir(dir, &why)) return dir;
  fs::path fallback = private_fallback_dir();
  static std::set<std::string> told;  // one message per directory
  if (told.insert(dir.string()).second)
    std::cerr << "volt: the kernel cache directory " << dir << " " << why << "; using " << fallback
              << " instead (set VOLT_KERNEL_CACHE to choose another)\n";
  return fallback;
}

// Runs the compiler on `src`, writing `out`; its messages go to `log`.  No shell.
bool run_compiler(const std::string& cxx, const fs::path& src, const fs::path& out, const fs::path& log,
                  std::string* output) {
  std::vector<std::string> args{cxx};
  args.insert(args.end(), kFlags.begin(), kFlags.end());
  args.insert(args.end(), {"-o", out.string(), src.string()});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, cxx.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *output = "cannot start '" + cxx + "': " + std::strerror(rc) + "\n";
    return false;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  read_file(log, output);
  std::error_code ec;
  fs::remove(log, ec);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string key_file_text(const std::string& library_bytes, const std::string& key) {
  std::ostringstream os;
  os << kMagic << "\nsize " << library_bytes.size() << "\nxxh3 " << std::hex
     << hash_bytes(library_bytes.data(), library_bytes.size()) << std::dec << "\nkey " << key.size() << "\n"
     << key;
  return os.str();
}

// Builds the entry for `key` at `library` (and its .key file).  Every file is
// made in a fresh private directory beside the entry (mkdtemp: no name another
// user or process could foresee), written O_EXCL|O_NOFOLLOW, and renamed into
// place, so no reader sees half a file and no planted link is followed.
bool build(const std::string& cxx, const std::string& source, const std::string& key, const fs::path& library,
           std::string* error) {
  const fs::path work = make_private_temp_dir(library.parent_path(), ".build-");
  if (work.empty()) {
    *error = "cannot make a build directory in " + library.parent_path().string() + ": " + std::strerror(errno) + "\n";
    return false;
  }
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  const fs::path src_tmp = work / "kernel.cpp", tmp = work / "kernel.so", meta_tmp = work / "kernel.key",
                 log = work / "compiler.log";
  fs::path src = library, meta = library;
  src.replace_extension(".cpp");
  meta.replace_extension(".key");
  std::string why;
  if (!write_new_file(src_tmp, source, &why)) {
    *error = why + "\n";
    return false;
  }
  const bool compiled = run_compiler(cxx, src_tmp, tmp, log, error);
  std::error_code ec;
  fs::rename(src_tmp, src, ec);  // kept beside the library, for readers
  if (!compiled) return false;
  std::string bytes;
  if (!read_file(tmp, &bytes)) {
    *error = "the compiler wrote no library at " + tmp.string() + "\n";
    return false;
  }
  if (!write_new_file(meta_tmp, key_file_text(bytes, key), &why)) {
    *error = why + "\n";
    return false;
  }
  fs::rename(tmp, library, ec);
  if (!ec) fs::rename(meta_tmp, meta, ec);
  if (ec) *error = "cannot store " + library.string() + ": " + ec.message() + "\n";
  return !ec;
}

}  // namespace

std::string kernel_cache_key(const std::string& source) {
  std::ostringstream os;
  os << "volt " << VOLT_VERSION << "\n" << toolchain_identity(compiler()) << "flags:";
  for (const std::string& f : kFlags) os << " " << f;
  os << "\nsource:\n" << source;
  return os.str();
}

fs::path kernel_cache_dir() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return resolve_dir();
}

fs::path kernel_cache_library(const std::string& source) {
  return kernel_cache_dir() / ("cpu_" + hex128(kernel_cache_key(source)) + ".so");
}

std::string kernel_cache_problem(const fs::path& library, const std::string& key) {
  fs::path meta = library;
  meta.replace_extension(".key");
  std::string text, bytes, why;
  if (!read_file(meta, &text, &why)) return "has no readable " + meta.filename().string() + " (it " + why + ")";
  std::istringstream in(text);
  std::string magic, word;
  unsigned long long size = 0, hash = 0, key_size = 0;
  std::getline(in, magic);
  if (magic != kMagic) return "has a .key file of another format";
  if (!(in >> word >> size) || word != "size" || !(in >> word >> std::hex >> hash >> std::dec) || word != "xxh3" ||
      !(in >> word >> key_size) || word != "key" || in.get() != '\n')
    return "has a damaged .key file";
  std::string stored(std::istreambuf_iterator<char>(in), {});
  if (stored.size() != key_size) return "has a damaged .key file (key cut short)";
  if (stored != key) return "belongs to another kernel (its stored key differs)";
  if (!read_file(library, &bytes, &why)) return "has no readable library (it " + why + ")";
  if (bytes.size() != size)
    return "is damaged (the library has " + std::to_string(bytes.size()) + " bytes, " + std::to_string(size) +
           " were stored)";
  if (hash_bytes(bytes.data(), bytes.size()) != hash) return "is damaged (the library's contents changed)";
  return "";
}

namespace {
std::vector<void*> load_host_kernels_impl(const std::string& body, const std::vector<std::string>& names,
                                          std::string* error, std::string* outcome, std::string* library_path);
std::mutex g_loads_mutex;
std::deque<KernelLoad> g_loads;
}  // namespace

std::vector<KernelLoad> recent_kernel_loads() {
  std::lock_guard<std::mutex> lock(g_loads_mutex);
  return {g_loads.begin(), g_loads.end()};
}

std::vector<void*> load_host_kernels(const std::string& body, const std::vector<std::string>& names,
                                     std::string* error) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string outcome = "compiled";
  std::string library_path;
  std::vector<void*> r = load_host_kernels_impl(body, names, error, &outcome, &library_path);
  note_kernel_load({names, body, r.empty() && !names.empty() ? "failed" : outcome,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                    library_path});
  return r;
}

void note_kernel_load(KernelLoad load) {
  std::lock_guard<std::mutex> lock(g_loads_mutex);
  g_loads.push_back(std::move(load));
  if (g_loads.size() > 64) g_loads.pop_front();
}

namespace {

std::vector<void*> load_host_kernels_impl(const std::string& body, const std::vector<std::string>& names,
                                          std::string* error, std::string* outcome, std::string* library_path) {
  const std::string cxx = compiler();
  std::string source_key = kernel_cache_key(body);
  const std::string hash = hex128(source_key);
  const std::string suffix = "_k" + hash.substr(0, 16);
  // The exported names carry the key: the source defines VOLT_KEY first.
  const std::string source = "#define VOLT_KEY " + suffix + "\n" + body;
  const std::string key = kernel_cache_key(source);

  std::lock_guard<std::mutex> lock(g_mutex);
  static std::unordered_map<std::string, void*> loaded;  // library path -> handle: one dlopen each
  const fs::path library = resolve_dir() / ("cpu_" + hash + ".so");
  *library_path = library.string();
  auto symbols = [&](void* handle, std::string* missing) {
    std::vector<void*> r;
    for (const std::string& n : names) {
      void* p = ::dlsym(handle, (n + suffix).c_str());
      if (!p) {
        *missing = n + suffix;
        return std::vector<void*>{};
      }
      r.push_back(p);
    }
    return r;
  };
  if (auto it = loaded.find(library.string()); it != loaded.end()) {
    *outcome = "loaded already";
    std::string missing;
    return symbols(it->second, &missing);
  }
  std::error_code ec;
  const fs::path meta = fs::path(library).replace_extension(".key");
  bool have = fs::exists(fs::symlink_status(library, ec));
  if (have || fs::exists(fs::symlink_status(meta, ec))) {
    std::string problem = kernel_cache_problem(library, key);
    if (!problem.empty()) {
      std::cerr << "volt: kernel cache entry " << library << " " << problem << "; compiling it again\n";
      have = false;
      // Whatever is not a regular file there (a directory, a link) is moved
      // out of the way of the new entry; a link is removed, never followed.
      for (const fs::path& p : {library, meta})
        if (!fs::is_regular_file(fs::symlink_status(p, ec))) fs::remove_all(p, ec);
    }
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    *outcome = have ? "disk cache" : "compiled";
    if (!have && !build(cxx, source, key, library, error)) return {};
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string missing;
    std::vector<void*> r;
    if (handle) r = symbols(handle, &missing);
    if (!r.empty() || names.empty()) {
      loaded[library.string()] = handle;
      return r;
    }
    std::string why = handle ? "does not export " + missing : std::string("cannot be loaded: ") + ::dlerror();
    if (handle) ::dlclose(handle);
    if (!have) {  // freshly built and still wrong: give up
      *error = library.string() + " " + why + "\n";
      return {};
    }
    std::cerr << "volt: kernel cache entry " << library << " " << why << "; compiling it again\n";
    have = false;
  }
  return {};
}

}  // namespace

}  // namespace volt::jit
