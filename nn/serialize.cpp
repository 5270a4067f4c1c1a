#include "nn/serialize.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "tensor/dispatch.h"

namespace volt::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build writes host bytes as they are");

namespace {

// ---- dtype names as safetensors spells them ----

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::b8: return "BOOL";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::f32: return "F32";
    case DType::f64: return "F64";
  }
  return "?";
}

bool st_dtype_from_name(const std::string& s, DType& out) {
  for (DType t : {DType::b8, DType::u8, DType::i32, DType::i64, DType::f32, DType::f64})
    if (s == st_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// ---- a small JSON reader, enough for a safetensors header ----

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  std::string text;  // String: the decoded text; Number: the literal as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json* find(const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonReader {
 public:
  JsonReader(std::string_view s, std::string context) : s_(s), context_(std::move(context)) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(context_ + "bad header: " + what + " at byte " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' ||
                                s_[pos_] == '\t'))
      ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of JSON");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 16) fail("nesting too deep");
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Kind::Object;
      ++pos_;
      bool first = true;
      while (!consume('}')) {
        if (!first) expect(',');
        first = false;
        if (peek() != '"') fail("expected a key");
        std::string key = string();
        expect(':');
        v.fields.emplace_back(std::move(key), value(depth + 1));
      }
    } else if (c == '[') {
      v.kind = Json::Kind::Array;
      ++pos_;
      bool first = true;
      while (!consume(']')) {
        if (!first) expect(',');
        first = false;
        v.items.push_back(value(depth + 1));
      }
    } else if (c == '"') {
      v.kind = Json::Kind::String;
      v.text = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Kind::Number;
      const size_t start = pos_;
      while (pos_ < s_.size() && std::strchr("+-.eE0123456789", s_[pos_])) ++pos_;
      v.text = std::string(s_.substr(start, pos_ - start));
    } else if (literal("true") || literal("false")) {
      v.kind = Json::Kind::Bool;
    } else if (!literal("null")) {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned code = 0;
          for (int k = 0; k < 4; ++k, ++pos_) {
            if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
              fail("bad \\u escape");
            code = code * 16 + std::stoul(std::string(1, s_[pos_]), nullptr, 16);
          }
          // Names are ASCII in practice; encode the BMP code point as UTF-8.
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: out += e;  // \" \\ \/
      }
    }
  }

  std::string_view s_;
  std::string context_;
  size_t pos_ = 0;
};

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---- the file ----

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // byte range within the data section
};

struct SafetensorsFile {
  std::vector<Entry> entries;
  std::vector<char> bytes;  // the whole file
  size_t data_start = 0;    // 8 + header length
  const char* data(const Entry& e) const { return bytes.data() + data_start + e.begin; }
};

std::string context_for(const std::string& path) { return "load: '" + path + "': "; }

uint64_t to_u64(const Json& j, const std::string& ctx, const std::string& what) {
  if (j.kind != Json::Kind::Number || j.text.empty() || j.text[0] == '-' ||
      j.text.find_first_not_of("0123456789") != std::string::npos)
    throw Error(ctx + "bad header: " + what + " must be a non-negative integer");
  try {
    return std::stoull(j.text);
  } catch (const std::exception&) {
    throw Error(ctx + "bad header: " + what + " is out of range");
  }
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string ctx = context_for(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(ctx + "file not found");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ctx + "cannot open the file");
  SafetensorsFile f;
  f.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const size_t size = f.bytes.size();

  if (size < 8)
    throw Error(ctx + "truncated: " + std::to_string(size) +
                " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, f.bytes.data(), 8);
  if (n > size - 8)
    throw Error(ctx + "truncated: the header length says " + std::to_string(n) +
                " bytes of JSON, the file has " + std::to_string(size - 8) + " after it");
  f.data_start = 8 + n;
  const uint64_t data_size = size - f.data_start;

  Json header = JsonReader(std::string_view(f.bytes.data() + 8, n), ctx).document();
  if (header.kind != Json::Kind::Object) throw Error(ctx + "bad header: not a JSON object");
  for (const auto& [name, v] : header.fields) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "'";
    if (v.kind != Json::Kind::Object) throw Error(ctx + "bad header: " + what + " is not an object");
    const Json* dtype = v.find("dtype");
    const Json* shape = v.find("shape");
    const Json* offsets = v.find("data_offsets");
    if (!dtype || !shape || !offsets)
      throw Error(ctx + "bad header: " + what + " needs dtype, shape and data_offsets");
    Entry e;
    e.name = name;
    if (dtype->kind != Json::Kind::String || !st_dtype_from_name(dtype->text, e.dtype))
      throw Error(ctx + "bad header: " + what + " has unsupported dtype '" + dtype->text + "'");
    if (shape->kind != Json::Kind::Array) throw Error(ctx + "bad header: " + what + " shape is not a list");
    for (const Json& d : shape->items)
      e.shape.push_back(static_cast<int64_t>(to_u64(d, ctx, what + " shape")));
    if (offsets->kind != Json::Kind::Array || offsets->items.size() != 2)
      throw Error(ctx + "bad header: " + what + " data_offsets must be [begin, end]");
    e.begin = to_u64(offsets->items[0], ctx, what + " data_offsets");
    e.end = to_u64(offsets->items[1], ctx, what + " data_offsets");
    const uint64_t nbytes = static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
    if (e.end < e.begin || e.end - e.begin != nbytes)
      throw Error(ctx + "bad header: " + what + " data_offsets [" + std::to_string(e.begin) +
                  ", " + std::to_string(e.end) + "] do not hold " + std::to_string(nbytes) +
                  " bytes for shape " + shape_str(e.shape));
    if (e.end > data_size)
      throw Error(ctx + "truncated: " + what + " ends at byte " + std::to_string(e.end) +
                  " of the data, which has only " + std::to_string(data_size));
    f.entries.push_back(std::move(e));
  }
  return f;
}

// A contiguous CPU tensor holding the entry's bytes.
Tensor to_tensor(const SafetensorsFile& f, const Entry& e) {
  Tensor t = Tensor::empty(e.shape, e.dtype, kCPU);
  if (e.end > e.begin) std::memcpy(t.raw_data(), f.data(e), e.end - e.begin);
  return t;
}

}  // namespace

void save_tensors(const NamedTensors& tensors, const std::string& path) {
  NoGradGuard no_grad;
  std::vector<Tensor> host;
  std::ostringstream header;
  header << "{";
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    VOLT_CHECK(t.has_data(), "save", "tensor '" << name << "' has no data (a traced value?)");
    Tensor c = t.to(kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    header << json_quote(name) << ":{\"dtype\":\"" << st_dtype_name(c.dtype()) << "\",\"shape\":[";
    for (size_t d = 0; d < c.sizes().size(); ++d) header << (d ? "," : "") << c.sizes()[d];
    header << "],\"data_offsets\":[" << offset << "," << offset + nbytes << "]},";
    offset += nbytes;
    host.push_back(c);
  }
  header << "\"__metadata__\":{\"format\":\"pt\"}}";
  std::string json = header.str();
  // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
  json.append((8 - json.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  VOLT_CHECK(out, "save", "cannot open '" << path << "' for writing");
  const uint64_t n = json.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(json.data(), static_cast<std::streamsize>(json.size()));
  for (const Tensor& c : host)
    out.write(static_cast<const char*>(c.raw_data()),
              static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
  VOLT_CHECK(out.good(), "save", "writing '" << path << "' failed");
}

NamedTensors load_tensors(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  NamedTensors out;
  for (const Entry& e : f.entries) out.emplace_back(e.name, to_tensor(f, e));
  return out;
}

void save(const Module& module, const std::string& path) {
  NamedTensors all = module.named_parameters();
  for (auto& nb : module.named_buffers()) all.push_back(nb);
  save_tensors(all, path);
}

void load(Module& module, const std::string& path, bool strict) {
  const std::string ctx = context_for(path);
  SafetensorsFile f = read_safetensors(path);
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : f.entries) by_name[e.name] = &e;

  NamedTensors targets = module.named_parameters();
  for (auto& nb : module.named_buffers()) targets.push_back(nb);

  // Check everything before changing anything.
  std::map<std::string, bool> used;
  for (const auto& [name, t] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(ctx + "missing tensor '" + name + "'");
    const Entry& e = *it->second;
    if (e.dtype != t.dtype())
      throw Error(ctx + "tensor '" + name + "' has dtype " + st_dtype_name(e.dtype) +
                  ", the module expects " + st_dtype_name(t.dtype()));
    if (e.shape != t.sizes())
      throw Error(ctx + "tensor '" + name + "' has shape " + shape_str(e.shape) +
                  ", the module expects " + shape_str(t.sizes()));
    used[name] = true;
  }
  if (strict)
    for (const Entry& e : f.entries)
      if (!used.count(e.name))
        throw Error(ctx + "unexpected tensor '" + e.name + "' (the module has no such name)");

  NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    const Entry& e = *by_name.at(name);
    if (t.device().is_cpu() && t.has_data() && t.is_contiguous()) {
      // Straight into the parameter's memory: no temporary, no autograd.
      if (e.end > e.begin) std::memcpy(t.raw_data(), f.data(e), e.end - e.begin);
    } else {
      Tensor dst = t;
      dst.copy_(to_tensor(f, e));
    }
  }
}

}  // namespace volt::nn
