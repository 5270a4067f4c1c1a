#include <volt/nn/serialize.h>

#include <nlohmann/json.hpp>

#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include <volt/tensor/dispatch.h>

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
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

bool st_dtype_from_name(const std::string& s, DType& out) {
  for (DType t : {DType::b8, DType::u8, DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16})
    if (s == st_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// ---- the header's JSON (nlohmann::json), refusing what the reference reader refuses ----

using Json = nlohmann::ordered_json;  // in file order: load_tensors keeps it

// Parses the header; a name given twice in one object, or nesting deeper than a
// header needs, is an error (nlohmann::json alone would keep the last duplicate).
Json parse_header(std::string_view text, const std::string& ctx) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > 16) throw Error(ctx + "bad header: nesting too deep");
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty()) {
      const std::string& name = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(name).second) throw Error(ctx + "bad header: the name '" + name + "' appears twice");
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    throw Error(ctx + "bad header: " + e.what());
  }
}

std::string json_quote(const std::string& s) { return Json(s).dump(); }

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

size_t stored_size(const Entry& e) { return dtype_size(e.dtype); }
const char* stored_name(const Entry& e) { return st_dtype_name(e.dtype); }

std::string shape_text(const Json& dims) {
  std::string r;
  for (size_t i = 0; i < dims.size(); ++i) r += (i ? ", " : "") + dims[i].dump();
  return r;
}

uint64_t to_u64(const Json& j, const std::string& ctx, const std::string& what) {
  if (!j.is_number_unsigned()) {
    const bool big = j.is_number_float() && j.get<double>() >= 0 && std::floor(j.get<double>()) == j.get<double>();
    throw Error(ctx + "bad header: " + what + (big ? " is out of range" : " must be a non-negative integer"));
  }
  return j.get<uint64_t>();
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string ctx = context_for(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(ctx + "file not found");
  if (std::filesystem::is_directory(path, ec)) throw Error(ctx + "is a directory, not a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ctx + "cannot open the file");
  SafetensorsFile f;
  try {
    f.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw Error(ctx + "cannot read the file: " + e.what());
  }
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

  const Json header = parse_header(std::string_view(f.bytes.data() + 8, n), ctx);
  if (!header.is_object()) throw Error(ctx + "bad header: not a JSON object");
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "'";
    if (!v.is_object()) throw Error(ctx + "bad header: " + what + " is not an object");
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw Error(ctx + "bad header: " + what + " needs dtype, shape and data_offsets");
    const Json* dtype = &v["dtype"];
    const Json* shape = &v["shape"];
    const Json* offsets = &v["data_offsets"];
    Entry e;
    e.name = name;
    if (!dtype->is_string() || !st_dtype_from_name(dtype->get<std::string>(), e.dtype))
      throw Error(ctx + "bad header: " + what + " has unsupported dtype '" +
                  (dtype->is_string() ? dtype->get<std::string>() : dtype->dump()) + "'");
    if (!shape->is_array()) throw Error(ctx + "bad header: " + what + " shape is not a list");
    // The byte count, every product checked: a wrapped count would let a huge
    // shape pass with a few bytes of data behind it.
    uint64_t nbytes = stored_size(e);
    for (const Json& d : *shape) {
      const uint64_t size = to_u64(d, ctx, what + " shape");
      if (size > uint64_t(INT64_MAX) || (size != 0 && nbytes > uint64_t(INT64_MAX) / size)) {
        throw Error(ctx + "bad header: " + what + " shape [" + shape_text(*shape) +
                    "] has more bytes than a 64-bit size can count");
      }
      nbytes *= size;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    if (!offsets->is_array() || offsets->size() != 2)
      throw Error(ctx + "bad header: " + what + " data_offsets must be [begin, end]");
    e.begin = to_u64((*offsets)[0], ctx, what + " data_offsets");
    e.end = to_u64((*offsets)[1], ctx, what + " data_offsets");
    if (e.end < e.begin || e.end - e.begin != nbytes)
      throw Error(ctx + "bad header: " + what + " data_offsets [" + std::to_string(e.begin) +
                  ", " + std::to_string(e.end) + "] do not hold " + std::to_string(nbytes) +
                  " bytes for " + stored_name(e) + " shape " + shape_str(e.shape));
    if (e.end > data_size)
      throw Error(ctx + "truncated: " + what + " ends at byte " + std::to_string(e.end) +
                  " of the data, which has only " + std::to_string(data_size));
    f.entries.push_back(std::move(e));
  }
  // No two tensors may share bytes (the reference reader refuses that too).
  std::vector<const Entry*> by_offset;
  for (const Entry& e : f.entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& a = *by_offset[i - 1];
    const Entry& b = *by_offset[i];
    if (b.begin < a.end)
      throw Error(ctx + "bad header: tensors '" + a.name + "' [" + std::to_string(a.begin) + ", " +
                  std::to_string(a.end) + ") and '" + b.name + "' [" + std::to_string(b.begin) +
                  ", " + std::to_string(b.end) + ") overlap in the data");
  }
  return f;
}

// Writes the entry's values into n contiguous elements of its dtype at dst.
void read_values(const SafetensorsFile& f, const Entry& e, void* dst) {
  if (e.end == e.begin) return;
  std::memcpy(dst, f.data(e), e.end - e.begin);
}

// A contiguous CPU tensor holding the entry's values.
Tensor to_tensor(const SafetensorsFile& f, const Entry& e) {
  Tensor t = Tensor::empty(e.shape, e.dtype, kCPU);
  read_values(f, e, t.raw_data());
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
    // A lazy tensor's value is computed by the copy to the CPU; a traced one has none.
    VOLT_CHECK(t.has_data() || t.device() == kLazy, "save", "tensor '" << name << "' has no data (a traced value?)");
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

NamedTensors load_tensors(const std::string& path, bool widen_16bit) {
  SafetensorsFile f = read_safetensors(path);
  NamedTensors out;
  for (const Entry& e : f.entries) {
    Tensor t = to_tensor(f, e);
    out.emplace_back(e.name, widen_16bit && is_half(t.dtype()) ? t.to(DType::f32) : t);
  }
  return out;
}

void save(const Module& module, const std::string& path) {
  save_tensors(module.state_dict(), path);
}

LoadResult load(Module& module, const std::string& path, bool strict) {
  const std::string ctx = context_for(path);
  SafetensorsFile f = read_safetensors(path);
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : f.entries) by_name[e.name] = &e;

  NamedTensors targets = module.state_dict();

  // Check everything before changing anything, and report every misfit at once.
  LoadResult result;
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const auto& [name, t] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      result.missing_keys.push_back(name);
      continue;
    }
    used.insert(name);
    const Entry& e = *it->second;
    // A bf16 or f16 tensor loads into any floating module (converted exactly
    // into f32 or f64; rounded into the other 16-bit type).
    const bool widened = is_half(e.dtype) && is_floating(t.dtype());
    if (e.dtype != t.dtype() && !widened)
      problems.push_back("tensor '" + name + "' has dtype " + stored_name(e) + ", the module expects " +
                         st_dtype_name(t.dtype()));
    if (e.shape != t.sizes())
      problems.push_back("tensor '" + name + "' has shape " + shape_str(e.shape) + ", the module expects " +
                         shape_str(t.sizes()));
  }
  for (const Entry& e : f.entries)
    if (!used.count(e.name)) result.unexpected_keys.push_back(e.name);
  if (strict) {
    for (const auto& k : result.missing_keys) problems.push_back("missing tensor '" + k + "'");
    for (const auto& k : result.unexpected_keys)
      problems.push_back("unexpected tensor '" + k + "' (the module has no such name)");
  }
  if (problems.size() == 1) throw Error(ctx + problems[0]);
  if (!problems.empty()) {
    std::string all = ctx + std::to_string(problems.size()) + " problems:";
    for (const auto& p : problems) all += "\n  " + p;
    throw Error(all);
  }

  NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    if (!used.count(name)) continue;  // missing, allowed without strict
    const Entry& e = *by_name.at(name);
    if (t.device().is_cpu() && t.has_data() && t.is_contiguous() && t.dtype() == e.dtype) {
      // Straight into the parameter's memory: no temporary, no autograd.
      read_values(f, e, t.raw_data());
      t.mark_modified();  // a new value: what holds a copy of the old one (autocast's cache) must see it
    } else {
      Tensor dst = t;
      dst.copy_(to_tensor(f, e).to(t.dtype()));
    }
  }
  return result;
}

}  // namespace volt::nn
