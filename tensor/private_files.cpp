#include <volt/tensor/private_files.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace volt {

namespace fs = std::filesystem;

namespace {

std::string mode_octal(mode_t m) {
  std::ostringstream os;
  os << std::oct << (m & 07777);
  return os.str();
}

// Why the status `st` of `what` is not a private one of this user.
std::string ownership_problem(const struct stat& st, bool want_dir) {
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return want_dir ? "is not a directory" : "is not a regular file";
  if (st.st_uid != ::geteuid()) return "is owned by uid " + std::to_string(st.st_uid) + ", not this user";
  if (want_dir && (st.st_mode & (S_IWGRP | S_IWOTH)))
    return "is writable by its group or others (mode " + mode_octal(st.st_mode) + ")";
  return "";
}

}  // namespace

bool private_dir(const fs::path& dir, std::string* why) {
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = std::string("cannot be created: ") + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    *why = std::string("cannot be examined: ") + std::strerror(errno);
    return false;
  }
  *why = ownership_problem(st, /*want_dir=*/true);
  return why->empty();
}

fs::path make_private_temp_dir(const fs::path& parent, const std::string& prefix) {
  std::string tmpl = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

std::string own_file_problem(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return std::string("cannot be examined: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  return ownership_problem(st, /*want_dir=*/false);
}

bool read_own_file(const fs::path& p, std::string* out, std::string* why) {
  std::string local;
  std::string& reason = why ? *why : local;
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    reason = errno == ELOOP ? "is a symbolic link" : std::string("cannot be opened: ") + std::strerror(errno);
    return false;
  }
  struct stat st {};
  reason = ::fstat(fd, &st) != 0 ? std::string("cannot be examined: ") + std::strerror(errno)
                                 : ownership_problem(st, /*want_dir=*/false);
  if (reason.empty()) {
    out->clear();
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) reason = std::string("cannot be read: ") + std::strerror(errno);
      if (n <= 0) break;
      out->append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reason.empty();
}

namespace {

// Writes `bytes` to `fd` and closes it; "" or why not.
std::string write_all(int fd, const std::string& bytes, const fs::path& p) {
  std::string reason;
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      reason = std::string("cannot write ") + p.string() + ": " + std::strerror(errno);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && reason.empty()) reason = std::string("cannot write ") + p.string() + ": " + std::strerror(errno);
  return reason;
}

}  // namespace

bool write_new_file(const fs::path& p, const std::string& bytes, std::string* why) {
  std::string local;
  std::string& reason = why ? *why : local;
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    reason = std::string("cannot create ") + p.string() + ": " + std::strerror(errno);
    return false;
  }
  reason = write_all(fd, bytes, p);
  return reason.empty();
}

bool write_file_replacing(const fs::path& file, const std::string& bytes, std::string* why) {
  std::string local;
  std::string& reason = why ? *why : local;
  std::string tmp = (file.parent_path() / ("." + file.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());  // O_CREAT|O_EXCL, 0600, a name no one foresaw
  if (fd < 0) {
    reason = std::string("cannot create a temporary file beside ") + file.string() + ": " + std::strerror(errno);
    return false;
  }
  reason = write_all(fd, bytes, tmp);
  std::error_code ec;
  if (reason.empty()) fs::rename(tmp, file, ec);
  if (ec) reason = "cannot rename " + tmp + " to " + file.string() + ": " + ec.message();
  if (!reason.empty()) fs::remove(tmp, ec);
  return reason.empty();
}

}  // namespace volt
