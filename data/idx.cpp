#include <volt/data/idx.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

namespace volt::data {
namespace {

constexpr const char* kOp = "read_idx";
constexpr uint8_t kTypeU8 = 0x08;

std::string hex(uint32_t v, int digits) {
  std::ostringstream os;
  os << "0x" << std::hex;
  os.width(digits);
  os.fill('0');
  os << v;
  return os.str();
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "x" : "") << dims[i];
  return os.str();
}

// gzread both inflates gzip files and passes other files through unchanged
// ("transparent" mode), so one reader serves raw and compressed files alike.
struct GzFile {
  gzFile f = nullptr;
  std::string path;

  explicit GzFile(const std::string& p) : path(p) {
    namespace fs = std::filesystem;
    std::error_code ec;
    VOLT_CHECK(fs::exists(p, ec), kOp, p << ": no such file");
    VOLT_CHECK(!fs::is_directory(p, ec), kOp, p << ": is a directory, not an IDX file");
    f = gzopen(p.c_str(), "rb");
    VOLT_CHECK(f, kOp, p << ": cannot open: " << std::strerror(errno));
    gzbuffer(f, 1 << 20);  // the default 8 KiB makes 47 MB of MNIST needlessly slow
  }
  ~GzFile() { gzclose(f); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // "file has 1000", said of the decompressed data for gzip, with the reason when a
  // gzip stream stops early (an interrupted download).
  std::string has(int64_t n) const {
    std::ostringstream os;
    os << (gzdirect(f) ? "file has " : "decompressed file has ") << n;
    if (cut_short()) os << " (the gzip stream ends early)";
    return os.str();
  }
  bool cut_short() const {
    int err = Z_OK;
    gzerror(f, &err);
    return err == Z_BUF_ERROR;
  }

  // Reads up to n bytes; fewer only at the end of the data.
  int64_t read(uint8_t* dst, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      auto chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 30));
      errno = 0;
      int r = gzread(f, dst + got, chunk);
      const int read_errno = errno;
      int err = Z_OK;
      const char* msg = gzerror(f, &err);
      // A failed read of the file itself is no fault of its gzip data.
      VOLT_CHECK(err != Z_ERRNO, kOp,
                 path << ": cannot read the file: " << std::strerror(read_errno ? read_errno : EIO));
      // Z_BUF_ERROR (a stream cut short) still delivers what was decoded; has() reports it.
      VOLT_CHECK(r >= 0 && (err == Z_OK || err == Z_BUF_ERROR), kOp,
                 path << ": corrupt gzip data: " << strip_path(msg));
      if (r == 0) break;
      got += r;
    }
    return got;
  }

  // zlib prefixes its messages with the path, which ours already names.
  std::string strip_path(const std::string& msg) const {
    return msg.starts_with(path + ": ") ? msg.substr(path.size() + 2) : msg;
  }
};

}  // namespace

IdxArray read_idx(const std::string& path, int expected_ndim) {
  GzFile file(path);
  IdxArray out;
  out.path = path;

  uint8_t magic[4];
  int64_t got = file.read(magic, 4);
  VOLT_CHECK(
      got == 4, kOp,
      path << ": truncated: an IDX file starts with a 4-byte magic number, " << file.has(got));
  const uint32_t m = uint32_t(magic[0]) << 24 | uint32_t(magic[1]) << 16 | magic[2] << 8 | magic[3];
  const int ndim = magic[3];
  VOLT_CHECK(magic[0] == 0 && magic[1] == 0, kOp,
             path << ": bad magic number " << hex(m, 8) << ": not an IDX file");
  VOLT_CHECK(magic[2] == kTypeU8, kOp,
             path << ": magic number " << hex(m, 8) << " has element type " << hex(magic[2], 2)
                  << "; only u8 (0x08) IDX files are supported");
  if (expected_ndim > 0) {
    VOLT_CHECK(ndim == expected_ndim, kOp,
               path << ": wrong magic number " << hex(m, 8) << " (a " << ndim
                    << "-D array), expected " << hex(0x800u + expected_ndim, 8) << " ("
                    << expected_ndim << "-D)");
  }
  VOLT_CHECK(ndim >= 1, kOp, path << ": magic number " << hex(m, 8) << " declares 0 dimensions");

  std::vector<uint8_t> header(4 * ndim);
  got = file.read(header.data(), 4 * ndim);
  VOLT_CHECK(got == 4 * ndim, kOp,
             path << ": truncated: the header needs " << 4 * ndim << " bytes of sizes for " << ndim
                  << " dims, " << file.has(got));
  // Each size is a big-endian u32; the product must fit comfortably in memory terms.
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint8_t* p = &header[4 * d];
    int64_t size = int64_t(p[0]) << 24 | int64_t(p[1]) << 16 | int64_t(p[2]) << 8 | p[3];
    out.dims.push_back(size);
    VOLT_CHECK(
        size > 0, kOp,
        path << ": header has size 0 in dim " << d << " (dims " << dims_str(out.dims) << ")");
    VOLT_CHECK(
        numel <= (int64_t(1) << 40) / size, kOp,
        path << ": header sizes " << dims_str(out.dims) << "... describe more than 1 TiB of data");
    numel *= size;
  }

  // Read in 64 MiB steps rather than trusting the header with one huge allocation:
  // a corrupt header then fails as "truncated" instead of exhausting memory.
  constexpr int64_t kStep = int64_t(1) << 26;
  while (static_cast<int64_t>(out.bytes.size()) < numel) {
    const int64_t have = out.bytes.size(), want = std::min(kStep, numel - have);
    out.bytes.resize(have + want);
    got = file.read(out.bytes.data() + have, want);
    out.bytes.resize(have + got);
    if (got < want) break;
  }
  VOLT_CHECK(static_cast<int64_t>(out.bytes.size()) == numel, kOp,
             path << ": truncated: header says " << dims_str(out.dims) << " = " << numel
                  << " bytes of data, " << file.has(out.bytes.size()));

  uint8_t extra[4096];
  int64_t n_extra = 0;
  while ((got = file.read(extra, sizeof extra)) > 0) n_extra += got;
  VOLT_CHECK(n_extra == 0, kOp,
             path << ": " << n_extra << " extra bytes after the " << numel
                  << " bytes of data that the header (" << dims_str(out.dims) << ") describes");
  // All the data came, but a stream cut inside its trailer leaves the CRC unchecked.
  VOLT_CHECK(!file.cut_short(), kOp,
             path << ": truncated: the gzip stream ends early, so its checksum cannot be verified");
  return out;
}

Tensor to_tensor(const IdxArray& a) {
  Tensor t = Tensor::empty(a.dims, DType::u8);
  std::memcpy(t.raw_data(), a.bytes.data(), a.bytes.size());
  return t;
}

Tensor images_to_float(const IdxArray& a) {
  VOLT_CHECK(a.dims.size() >= 2, "images_to_float",
             a.path << ": images need dims (N, R, C), got " << dims_str(a.dims));
  const int64_t n = a.dims[0], row = static_cast<int64_t>(a.bytes.size()) / n;
  Tensor t = Tensor::empty({n, row}, DType::f32);
  float* dst = t.data_ptr<float>();
  // Divide (not multiply by 1/255) so values equal torchvision's ToTensor bit for bit.
  for (size_t i = 0; i < a.bytes.size(); ++i) dst[i] = static_cast<float>(a.bytes[i]) / 255.0f;
  return t;
}

Tensor labels_to_int64(const IdxArray& a) {
  VOLT_CHECK(a.dims.size() == 1, "labels_to_int64",
             a.path << ": labels need dims (N), got " << dims_str(a.dims));
  Tensor t = Tensor::empty({a.dims[0]}, DType::i64);
  std::copy(a.bytes.begin(), a.bytes.end(), t.data_ptr<int64_t>());
  return t;
}

}  // namespace volt::data
