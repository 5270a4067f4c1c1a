// Files that only this user can have made: the kernel caches' directories
// and entries (host libraries, CUDA images) and the Graphviz scratch files of
// a report.  A library loaded from disk runs with this process's rights, so
// volt reads or loads a file only when this effective user owns it and it is
// a regular file (never through a symbolic link), keeps it in a directory no
// one else may write, and writes every file under a fresh name
// (O_CREAT|O_EXCL|O_NOFOLLOW) that is then renamed into place.  Nothing here
// throws: each call says why it failed.
#pragma once
#include <filesystem>
#include <string>

namespace volt {

// Makes `dir` (0700 where it is new, its parents as usual) and says whether it
// is a directory owned by this effective user that neither its group nor
// others may write; `why` says why not ("cannot be created: ...", "is owned by
// uid 65534", "is writable by its group or others (mode 777)").
bool private_dir(const std::filesystem::path& dir, std::string* why);

// A new directory <parent>/<prefix>XXXXXX made by mkdtemp (0700); empty when
// it could not be made.
std::filesystem::path make_private_temp_dir(const std::filesystem::path& parent, const std::string& prefix);

// Why `p` may not be read or loaded ("" when it may): it is missing, a link,
// not a regular file, or owned by another user.
std::string own_file_problem(const std::filesystem::path& p);

// Reads `p` whole, opened without following a link and checked (fstat) to be
// a regular file of this user; false with `why` otherwise.
bool read_own_file(const std::filesystem::path& p, std::string* out, std::string* why = nullptr);

// Writes `bytes` to `p`, which must not exist yet (O_CREAT|O_EXCL|O_NOFOLLOW,
// mode 0600); false with `why` otherwise.
bool write_new_file(const std::filesystem::path& p, const std::string& bytes, std::string* why = nullptr);

// Writes `bytes` to a new file <dir>/<prefix>XXXXXX made by mkstemp (O_EXCL,
// 0600) and renames it to `file`; false with `why` otherwise (the temporary
// file is removed).
bool write_file_replacing(const std::filesystem::path& file, const std::string& bytes, std::string* why = nullptr);

}  // namespace volt
