// The bad-input catalogue: one table of wrong calls across volt, each of which
// must raise a volt::Error (nothing else, no crash) whose message names the op
// (or file) and says what was expected.  A row is {what the call is, the call,
// text the message must contain, more text it must contain}.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <volt/autograd/gradcheck.h>
#include <volt/data/idx.h>
#include <volt/nn/linear.h>
#include <volt/nn/loss.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/nn/sequential.h>
#include <volt/nn/activation.h>
#include <volt/nn/serialize.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/tensor.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

struct BadCase {
  const char* name;
  std::function<void()> call;
  const char* names;     // the op or file the message must name
  const char* expected;  // and what it says was expected
};

Tensor f32(Shape s) { return Tensor::ones(s); }
Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v); }
Tensor leaf(Shape s) { return Tensor::ones(s).requires_grad_(); }

// Scratch files for the file rows, one folder per run.
struct Files {
  fs::path dir = fs::temp_directory_path() / ("volt_bad_inputs_" + std::to_string(::getpid()));
  Files() { fs::create_directories(dir); }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

std::string st_file(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\0');
}

std::string idx_file(std::vector<uint8_t> header, size_t data_bytes) {
  std::string out(header.begin(), header.end());
  return out + std::string(data_bytes, '\x01');
}

std::vector<BadCase> catalogue(const Files& fl) {
  const Tensor a23 = f32({2, 3}), a4 = f32({4}), b8 = Tensor::ones({3}, DType::b8);
  const Tensor logits = f32({2, 3});
  return {
      // ---- elementwise: shapes, dtypes, devices ----
      {"add broadcast", [=] { add(a23, a4); }, "add:", "cannot be broadcast"},
      {"sub broadcast", [=] { sub(a23, a4); }, "sub:", "cannot be broadcast"},
      {"mul broadcast", [=] { mul(a23, a4); }, "mul:", "cannot be broadcast"},
      {"div broadcast", [=] { div(a23, a4); }, "div:", "cannot be broadcast"},
      {"pow broadcast", [=] { pow(a23, a4); }, "pow:", "cannot be broadcast"},
      {"maximum broadcast", [=] { maximum(a23, a4); }, "maximum:", "cannot be broadcast"},
      {"minimum broadcast", [=] { minimum(a23, a4); }, "minimum:", "cannot be broadcast"},
      {"eq broadcast", [=] { eq(a23, a4); }, "eq:", "cannot be broadcast"},
      {"lt broadcast", [=] { lt(a23, a4); }, "lt:", "cannot be broadcast"},
      {"ge broadcast", [=] { ge(a23, a4); }, "ge:", "cannot be broadcast"},
      {"logical_and broadcast", [=] { logical_and(b8, Tensor::ones({2}, DType::b8)); }, "logical_and:", "cannot be broadcast"},
      {"where broadcast", [=] { where(b8, a23, a4); }, "where:", "cannot be broadcast"},
      {"where condition f32", [=] { where(a4, a4, a4); }, "where:", "condition must be b8"},
      {"where condition number", [=] { where(Value(1.5), a4, a4); }, "where:", "condition must be b8"},
      {"neg of b8", [=] { neg(b8); }, "neg:", "not defined for b8"},
      {"abs of b8", [=] { abs(b8); }, "abs:", "not defined for b8"},
      {"sub of b8", [=] { sub(b8, b8); }, "sub:", "not defined for b8"},
      {"div of undefined", [=] { div(a4, Tensor()); }, "div:", "undefined tensor"},
      {"exp of undefined", [] { exp(Tensor()); }, "exp:", "undefined tensor"},
      {"add of two numbers", [] { add(Value(1.0), Value(2.0)); }, "add:", "at least one tensor"},
      {"add cpu + lazy", [=] { add(a4, Tensor::ones({4}, DType::f32, kLazy)); }, "add:", "one device"},
      {"mul lazy + cpu", [=] { mul(Tensor::ones({4}, DType::f32, kLazy), a4); }, "mul:", "one device"},
      // ---- reductions ----
      {"sum dim out of range", [=] { sum(a23, {2}); }, "sum:", "out of range"},
      {"sum negative dim", [=] { sum(a23, {-3}); }, "sum:", "expected -2..1"},
      {"sum repeated dim", [=] { sum(a23, {1, -1}); }, "sum:", "appears twice"},
      {"amax dim out of range", [=] { amax(a23, {5}); }, "amax:", "out of range"},
      {"amax empty dim", [] { amax(Tensor::ones({2, 0}), {1}); }, "amax:", "empty dim"},
      {"amin of empty", [] { amin(Tensor::ones({0})); }, "amin:", "empty dim"},
      {"argmax dim out of range", [=] { argmax(a23, 2); }, "argmax:", "out of range"},
      {"argmin of empty dim", [] { argmin(Tensor::ones({3, 0}), 1); }, "argmin:", "empty dim"},
      {"mean of i64", [] { mean(i64({1, 2})); }, "mean:", "expected a floating tensor"},
      {"mean dim out of range", [=] { mean(a23, {3}); }, "mean:", "out of range"},
      {"var of i64", [] { var(i64({1, 2})); }, "var:", "expected a floating tensor"},
      {"softmax dim", [=] { softmax(a23, 2); }, "softmax:", "out of range"},
      {"log_softmax dim", [=] { log_softmax(a4, -2); }, "log_softmax:", "out of range"},
      // ---- linear algebra ----
      {"matmul inner mismatch", [=] { matmul(a23, a23); }, "matmul:", "cannot be multiplied"},
      {"matmul 0-dim", [] { matmul(Tensor::ones({}), f32({3})); }, "matmul:", "at least one dim"},
      {"matmul dtypes", [=] { matmul(a23, Tensor::ones({3, 2}, DType::f64)); }, "matmul:", "one dtype"},
      {"matmul integers", [] { matmul(i64({1, 2}), i64({1, 2})); }, "matmul:", "floating"},
      {"matmul batch broadcast", [] { matmul(f32({2, 2, 3}), f32({3, 3, 4})); }, "matmul:", "cannot be broadcast"},
      {"linear weight 1-D", [=] { linear(a23, a4); }, "linear:", "weight must be 2-D"},
      {"linear in mismatch", [=] { linear(a23, f32({5, 4})); }, "linear:", "do not match"},
      {"linear bias shape", [=] { linear(a23, f32({5, 3}), f32({4})); }, "linear:", "bias must be f32[5]"},
      {"linear dtypes", [=] { linear(a23, Tensor::ones({5, 3}, DType::f64)); }, "linear:", "one dtype"},
      // ---- views ----
      {"view non-contiguous", [=] { a23.t().view({6}); }, "view:", "use reshape()"},
      {"view wrong numel", [=] { a23.view({4}); }, "view:", "invalid for input of size 6"},
      {"reshape wrong numel", [=] { a23.reshape({7}); }, "reshape:", "invalid for input of size 6"},
      {"reshape two -1", [=] { a23.reshape({-1, -1}); }, "reshape:", "only one dimension can be -1"},
      {"reshape -1 of 0", [] { Tensor::ones({0}).reshape({0, -1}); }, "reshape:", "invalid for input of size 0"},
      {"reshape negative", [=] { a23.reshape({-2, -3}); }, "reshape:", "invalid shape"},
      {"expand fewer dims", [=] { a23.expand({3}); }, "expand:", "fewer dims"},
      {"expand mismatch", [=] { a23.expand({4, 3}); }, "expand:", "must match the existing size"},
      {"expand negative", [=] { a4.expand({-2, 4}); }, "expand:", "invalid size"},
      {"narrow past end", [=] { a23.narrow(1, 2, 2); }, "narrow:", "out of bounds"},
      {"narrow negative length", [=] { a23.narrow(1, 0, -1); }, "narrow:", "out of bounds"},
      {"narrow dim", [=] { a23.narrow(2, 0, 1); }, "narrow:", "out of range"},
      {"select index", [=] { a23.select(0, 2); }, "select:", "out of range for dim 0 of size 2"},
      {"select negative index", [=] { a23.select(1, -4); }, "select:", "out of range"},
      {"select 0-dim", [] { Tensor::ones({}).select(0, 0); }, "select:", "0-dim"},
      {"select of empty", [] { Tensor::ones({0, 2}).select(0, 0); }, "select:", "of size 0"},
      {"index operator", [=] { a4[4]; }, "select:", "out of range"},
      {"squeeze dim", [=] { a23.squeeze(2); }, "squeeze:", "out of range"},
      {"unsqueeze dim", [=] { a23.unsqueeze(4); }, "unsqueeze:", "out of range"},
      {"permute count", [=] { a23.permute({0}); }, "permute:", "got 1 dims for a tensor of 2"},
      {"permute repeat", [=] { a23.permute({1, 1}); }, "permute:", "repeats"},
      {"permute dim", [=] { a23.permute({0, 2}); }, "permute:", "out of range"},
      {"transpose dim", [=] { a23.transpose(0, 2); }, "transpose:", "out of range"},
      {"t of 3-D", [] { f32({2, 2, 2}).t(); }, "t:", "<= 2 dims"},
      {"flatten start > end", [] { f32({2, 2, 2}).flatten(2, 1); }, "flatten:", "> end_dim"},
      {"size dim", [=] { a23.size(2); }, "size:", "out of range"},
      {"stride dim", [=] { a23.stride(-3); }, "stride:", "out of range"},
      {"slice dim", [=] { a23.slice(3, 0, 1); }, "slice:", "out of range"},
      {"pad negative", [=] { pad(a23, 0, -1, 0); }, "pad:", "negative padding"},
      // ---- factories and values ----
      {"empty negative", [] { Tensor::empty({2, -1}); }, "empty:", "negative dimension"},
      {"zeros negative", [] { Tensor::zeros({-1}); }, "full:", "negative dimension"},
      {"full huge", [] { Tensor::full({int64_t(1) << 62, 8}, 1.0); }, "full:", "more elements"},
      {"empty 2^62 f32", [] { Tensor::empty({int64_t(1) << 62}); }, "empty:", "more elements"},
      {"rand of i64", [] { Tensor::rand({2}, DType::i64); }, "rand:", "floating dtype"},
      {"randn of u8", [] { Tensor::randn({2}, DType::u8); }, "randn:", "floating dtype"},
      {"randint low >= high", [] { Tensor::randint(5, 5, {2}); }, "randint:", "low < high"},
      {"arange step 0", [] { Tensor::arange(0, 3, 0); }, "arange:", "step must be nonzero"},
      {"arange NaN", [] { Tensor::arange(0, NAN, 1); }, "arange:", "finite"},
      {"arange Inf", [] { Tensor::arange(-INFINITY, 0, 1); }, "arange:", "finite"},
      {"full i64 NaN", [] { Tensor::full({2}, NAN, DType::i64); }, "full:", "cannot be converted to i64"},
      {"full i32 Inf", [] { Tensor::full({2}, INFINITY, DType::i32); }, "full:", "cannot be converted to i32"},
      {"full u8 overflow", [] { Tensor::full({2}, 1e20, DType::u8); }, "full:", "cannot be converted to u8"},
      {"fill_ i64 NaN", [] { Tensor::zeros({2}, DType::i64).fill_(NAN); }, "full:", "cannot be converted"},
      {"from_vector count", [] { Tensor::from_vector<float>({1, 2, 3}, {2, 2}); }, "from_vector:", "cannot fill shape [2, 2]"},
      {"item of many", [=] { a4.item<float>(); }, "item:", "one element"},
      {"item of empty", [] { Tensor::ones({0}).item<float>(); }, "item:", "one element"},
      {"bool of many", [=] { (void)static_cast<bool>(a4); }, "bool:", "ambiguous"},
      {"data_ptr dtype", [=] { a4.data_ptr<double>(); }, "data_ptr:", "asked for f64"},
      {"undefined tensor", [] { Tensor().sizes(); }, "Tensor:", "undefined tensor"},
      {"convert undefined", [] { convert_element_type(Tensor(), DType::f64); }, "convert_element_type:", "undefined"},
      {"dropout p > 1", [=] { dropout(a4, 1.5, true); }, "dropout:", "between 0 and 1"},
      {"dropout p NaN", [=] { dropout(a4, NAN, true); }, "dropout:", "between 0 and 1"},
      // ---- losses, targets, indices ----
      {"cross_entropy target high", [=] { cross_entropy(logits, i64({0, 3})); }, "cross_entropy", "[0, 3)"},
      {"cross_entropy target negative", [=] { cross_entropy(logits, i64({-1, 0})); }, "cross_entropy", "[0, 3)"},
      {"cross_entropy 1-D logits", [=] { cross_entropy(a4, i64({0})); }, "cross_entropy:", "logits (N, C)"},
      {"cross_entropy no classes", [] { cross_entropy(f32({2, 0}), i64({0, 0})); }, "cross_entropy:", "C >= 1"},
      {"cross_entropy float target", [=] { cross_entropy(logits, f32({2})); }, "cross_entropy:", "integer target"},
      {"cross_entropy target length", [=] { cross_entropy(logits, i64({0, 1, 2})); }, "cross_entropy:", "target (2)"},
      {"cross_entropy i64 logits", [] { cross_entropy(Tensor::ones({2, 3}, DType::i64), i64({0, 1})); }, "cross_entropy:", "f32 or f64 logits"},
      {"nll_loss target high", [=] { nll_loss(logits, i64({5, 0})); }, "nll_loss:", "must lie in [0, 3)"},
      {"nll_loss 3-D", [] { nll_loss(f32({2, 3, 1}), i64({0, 1})); }, "nll_loss:", "(N, C)"},
      {"nll_loss float target", [=] { nll_loss(logits, f32({2})); }, "nll_loss:", "integer target"},
      {"CrossEntropyLoss logits", [=] { nn::CrossEntropyLoss()(a4, i64({0})); }, "CrossEntropyLoss:", "logits (N, C)"},
      {"CrossEntropyLoss target dtype", [=] { nn::CrossEntropyLoss()(logits, f32({2})); }, "CrossEntropyLoss:", "integer dtype"},
      // ---- autograd and in-place ----
      {"backward without grad", [=] { a4.sum().backward(); }, "backward:", "does not require grad"},
      {"backward of non-scalar", [] { mul(leaf({3}), 2.0).backward(); }, "backward:", "only for scalar outputs"},
      {"backward gradient shape", [] { mul(leaf({3}), 2.0).backward(f32({2})); }, "backward:", "does not match output"},
      {"backward twice", [] { Tensor l = mul(leaf({3}), leaf({3})).sum(); l.backward(); l.backward(); }, "backward:", "a second time"},
      {"requires_grad_ of i64", [] { i64({1}).requires_grad_(); }, "requires_grad_:", "only floating tensors"},
      {"in place on leaf", [] { leaf({3}).add_(1.0); }, "add_:", "leaf tensor that requires grad"},
      {"in place on a leaf's view", [] { leaf({3}).narrow(0, 0, 1).mul_(2.0); }, "mul_:", "view"},
      {"copy_ into expanded", [] { Tensor::zeros({1, 3}).expand({2, 3}).copy_(f32({2, 3})); }, "copy_:", "expanded view"},
      {"fill_ into expanded", [] { Tensor::zeros({3, 1}).expand({3, 4}).fill_(1.0); }, "fill_:", "expanded view"},
      {"copy_ shape", [=] { Tensor::zeros({2, 3}).copy_(a4); }, "expand:", "must match"},
      {"saved tensor modified", [] { Tensor x = leaf({2}); Tensor y = mul(x, 2.0); Tensor z = exp(y).sum(); y.mul_(3.0); z.backward(); }, "backward:", "exp_backward"},
      // ---- modules and optimizers ----
      {"Linear zero features", [] { nn::Linear(0, 3); }, "Linear:", "must be positive"},
      {"Linear wrong input", [] { nn::Linear fc(3, 2); fc(f32({4, 5})); }, "linear:", "do not match"},
      {"duplicate parameter", [] { nn::Sequential m; m.register_parameter("w", f32({1})); m.register_parameter("w", f32({1})); }, "register_parameter", "w"},
      {"dotted parameter name", [] { nn::Sequential m; m.register_parameter("a.b", f32({1})); }, "register_parameter", "a.b"},
      {"Sequential index", [] { nn::Sequential s; s.push_back(std::make_shared<nn::ReLU>()); s[3]; }, "Sequential:", "out of range"},
      {"Dropout p", [] { nn::Dropout d(2.0); }, "Dropout:", "[0, 1]"},
      {"SGD negative lr", [] { nn::SGD({leaf({1})}, {.lr = -1.0}); }, "SGD:", "lr must be >= 0"},
      {"SGD NaN lr", [] { nn::SGD({leaf({1})}, {.lr = NAN}); }, "SGD:", "lr must be >= 0"},
      {"SGD negative momentum", [] { nn::SGD({leaf({1})}, {.lr = 0.1, .momentum = -0.5}); }, "SGD:", "momentum"},
      {"Adam beta1", [] { nn::Adam({leaf({1})}, {.beta1 = 1.0}); }, "Adam:", "beta1"},
      {"Adam beta2", [] { nn::Adam({leaf({1})}, {.beta2 = -0.1}); }, "Adam:", "beta2"},
      {"Adam eps", [] { nn::Adam({leaf({1})}, {.eps = -1.0}); }, "Adam:", "eps"},
      {"optimizer undefined param", [] { nn::SGD({Tensor()}, {}); }, "optimizer:", "undefined"},
      {"optimizer grad shape", [] { Tensor p = leaf({2}); p.set_grad(f32({3})); nn::SGD o({p}, {}); o.step(); }, "optimizer step:", "grad has shape [3]"},
      // ---- files: safetensors ----
      {"safetensors missing", [&fl] { nn::load_tensors(fl.path("nope.safetensors")); }, "nope.safetensors", "file not found"},
      {"safetensors directory", [&fl] { nn::load_tensors(fl.dir.string()); }, "volt_bad_inputs_", "is a directory"},
      {"safetensors unreadable", [] { nn::load_tensors("/proc/self/mem"); }, "/proc/self/mem", "cannot read the file"},
      {"safetensors empty", [&fl] { nn::load_tensors(fl.write("e.st", "")); }, "e.st", "too short for the 8-byte header length"},
      {"safetensors header cut", [&fl] { nn::load_tensors(fl.write("h.st", st_file("{\"a\":1}", 0).substr(0, 12))); }, "h.st", "truncated: the header length"},
      {"safetensors bad JSON", [&fl] { nn::load_tensors(fl.write("j.st", st_file("{\"a\": [1,", 0))); }, "j.st", "bad header"},
      {"safetensors not object", [&fl] { nn::load_tensors(fl.write("o.st", st_file("[1]", 0))); }, "o.st", "not a JSON object"},
      {"safetensors deep JSON", [&fl] { nn::load_tensors(fl.write("d.st", st_file(std::string(40, '[') + std::string(40, ']'), 0))); }, "d.st", "nesting too deep"},
      {"safetensors dtype", [&fl] { nn::load_tensors(fl.write("t.st", st_file("{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8))); }, "t.st", "unsupported dtype 'C64'"},
      {"safetensors no offsets", [&fl] { nn::load_tensors(fl.write("n.st", st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4))); }, "n.st", "needs dtype, shape and data_offsets"},
      {"safetensors offsets reversed", [&fl] { nn::load_tensors(fl.write("r.st", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4))); }, "r.st", "do not hold 0 bytes"},
      {"safetensors data cut", [&fl] { nn::load_tensors(fl.write("c.st", st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8))); }, "c.st", "truncated: tensor 'a'"},
      {"safetensors overflow", [&fl] { nn::load_tensors(fl.write("v.st", st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0))); }, "v.st", "more bytes than a 64-bit size"},
      {"safetensors huge number", [&fl] { nn::load_tensors(fl.write("u.st", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,0]}}", 0))); }, "u.st", "out of range"},
      {"safetensors duplicate", [&fl] { nn::load_tensors(fl.write("2.st", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2))); }, "2.st", "appears twice"},
      {"safetensors overlap", [&fl] { nn::load_tensors(fl.write("x.st", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3))); }, "x.st", "overlap"},
      {"load into wrong shape", [&fl] { nn::Linear fc(2, 2); nn::save_tensors({{"weight", f32({3, 2})}, {"bias", f32({2})}}, fl.path("s.st")); nn::load(fc, fl.path("s.st")); }, "s.st", "the module expects [2, 2]"},
      {"load missing tensor", [&fl] { nn::Linear fc(2, 2); nn::save_tensors({{"weight", f32({2, 2})}}, fl.path("m.st")); nn::load(fc, fl.path("m.st")); }, "m.st", "missing tensor 'bias'"},
      {"save to missing folder", [&fl] { nn::save_tensors({{"w", f32({1})}}, fl.path("no/such/dir.st")); }, "save:", "cannot open"},
      // ---- files: IDX ----
      {"idx missing", [&fl] { data::read_idx(fl.path("nope.idx")); }, "read_idx: ", "no such file"},
      {"idx directory", [&fl] { data::read_idx(fl.dir.string()); }, "read_idx: ", "is a directory"},
      {"idx empty", [&fl] { data::read_idx(fl.write("e.idx", "")); }, "e.idx", "4-byte magic number"},
      {"idx bad magic", [&fl] { data::read_idx(fl.write("m.idx", idx_file({1, 2, 8, 1, 0, 0, 0, 1}, 1))); }, "m.idx", "not an IDX file"},
      {"idx float type", [&fl] { data::read_idx(fl.write("f.idx", idx_file({0, 0, 0x0D, 1, 0, 0, 0, 1}, 4))); }, "f.idx", "only u8 (0x08)"},
      {"idx wrong rank", [&fl] { data::read_idx(fl.write("r.idx", idx_file({0, 0, 8, 1, 0, 0, 0, 2}, 2)), 3); }, "r.idx", "expected 0x00000803"},
      {"idx zero dims", [&fl] { data::read_idx(fl.write("z.idx", idx_file({0, 0, 8, 0}, 0))); }, "z.idx", "declares 0 dimensions"},
      {"idx size 0", [&fl] { data::read_idx(fl.write("s.idx", idx_file({0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 0}, 0))); }, "s.idx", "size 0 in dim 1"},
      {"idx header cut", [&fl] { data::read_idx(fl.write("h.idx", idx_file({0, 0, 8, 3, 0, 0}, 0))); }, "h.idx", "the header needs 12 bytes"},
      {"idx data cut", [&fl] { data::read_idx(fl.write("d.idx", idx_file({0, 0, 8, 1, 0, 0, 0, 9}, 4))); }, "d.idx", "truncated: header says 9"},
      {"idx extra bytes", [&fl] { data::read_idx(fl.write("x.idx", idx_file({0, 0, 8, 1, 0, 0, 0, 2}, 5))); }, "x.idx", "3 extra bytes"},
      {"idx too large", [&fl] { data::read_idx(fl.write("l.idx", idx_file({0, 0, 8, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, 0))); }, "l.idx", "more than 1 TiB"},
      {"idx corrupt gzip", [&fl] { data::read_idx(fl.write("g.idx.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff", 14))); }, "g.idx.gz", "gzip"},
      {"idx unreadable", [] { data::read_idx("/proc/self/mem"); }, "/proc/self/mem", "cannot read the file"},
      {"images_to_float of labels", [&fl] { data::images_to_float(data::read_idx(fl.write("lab.idx", idx_file({0, 0, 8, 1, 0, 0, 0, 2}, 2)))); }, "images_to_float:", "lab.idx"},
      {"labels_to_int64 of images", [&fl] { data::labels_to_int64(data::read_idx(fl.write("img.idx", idx_file({0, 0, 8, 2, 0, 0, 0, 1, 0, 0, 0, 2}, 2)))); }, "labels_to_int64:", "labels need dims (N)"},
  };
}

}  // namespace

TEST_CASE("bad inputs: every row raises a volt::Error naming the op and what it expected") {
  Files files;
  const std::vector<BadCase> rows = catalogue(files);
  MESSAGE(rows.size() << " bad-input cases");
  CHECK(rows.size() >= 100);
  int passed = 0;
  for (const BadCase& row : rows) {
    const std::string name = row.name;
    CAPTURE(name);
    std::string message;
    bool volt_error = false;
    try {
      row.call();
    } catch (const Error& e) {
      volt_error = true;
      message = e.what();
    } catch (const std::exception& e) {
      message = std::string("not a volt::Error: ") + e.what();
    }
    CAPTURE(message);
    CHECK(volt_error);
    CHECK(message.find(row.names) != std::string::npos);
    CHECK(message.find(row.expected) != std::string::npos);
    passed += volt_error && message.find(row.names) != std::string::npos &&
              message.find(row.expected) != std::string::npos;
  }
  CHECK(passed == static_cast<int>(rows.size()));
}
