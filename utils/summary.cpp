#include <volt/utils/summary.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include <volt/autograd/grad_mode.h>
#include <volt/nn/call_observer.h>
#include <volt/tensor/error.h>

namespace volt::utils {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t nbytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

// Every layer's mode, restored on the way out (a model may mix train and eval layers).
class EvalForTheCall {
 public:
  explicit EvalForTheCall(nn::Module& model) {
    for (auto& [name, m] : model.named_modules()) saved_.emplace_back(m.get(), m->is_training());
    model.eval();
  }
  ~EvalForTheCall() {
    for (auto [m, training] : saved_) m->train(training);
  }

 private:
  std::vector<std::pair<nn::Module*, bool>> saved_;
};

void count_parameters(const nn::Module& m, LayerSummary& row) {
  for (const Tensor& p : m.parameters()) {
    row.params += p.numel();
    if (p.requires_grad()) row.trainable_params += p.numel();
    row.param_bytes += nbytes(p);
  }
}

}  // namespace

std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), r;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) r += ',';
    r += digits[i];
  }
  return (n < 0 ? "-" : "") + r;
}

std::string human_bytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

ModelSummary summary(nn::Module& model, const Tensor& input) {
  VOLT_CHECK(input.defined(), "summary", "expected an input tensor to run through the model, got an undefined one");
  ModelSummary s;
  s.input_shape.assign(input.sizes().begin(), input.sizes().end());
  std::map<const nn::Module*, size_t> row_of;
  for (const auto& [name, m] : model.named_modules()) {
    LayerSummary row;
    row.name = name;
    row.type = m->type_name();
    row.depth = name.empty() ? 0 : 1 + static_cast<int>(std::count(name.begin(), name.end(), '.'));
    count_parameters(*m, row);
    row_of[m.get()] = s.layers.size();
    s.layers.push_back(std::move(row));
  }
  // The model itself may not be owned by a shared_ptr: named_modules() then
  // hands out a handle that owns nothing, with the same address.
  row_of[&model] = 0;
  {
    EvalForTheCall eval(model);
    NoGradGuard no_grad;
    nn::ObserveCalls watch([&](const nn::Module& m, const Tensor& y) {
      auto it = row_of.find(&m);
      if (it == row_of.end() || s.layers[it->second].called || !y.defined()) return;
      LayerSummary& row = s.layers[it->second];
      row.called = true;
      row.output_shape.assign(y.sizes().begin(), y.sizes().end());
      row.output_bytes = nbytes(y);
    });
    model(input);
  }
  return s;
}

std::string ModelSummary::table() const {
  std::vector<std::vector<std::string>> rows = {{"layer (type)", "output shape", "params", "param bytes"}};
  for (const auto& l : layers)
    rows.push_back({std::string(2 * l.depth, ' ') + l.name + (l.name.empty() ? "" : " ") + "(" + l.type + ")",
                    l.called ? shape_str(l.output_shape) : "--", grouped(l.params), human_bytes(l.param_bytes)});
  size_t width[4] = {0, 0, 0, 0};
  for (const auto& r : rows)
    for (size_t c = 0; c < 4; ++c) width[c] = std::max(width[c], r[c].size());
  std::ostringstream os;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < 4; ++c) line += r[c] + std::string(c < 3 ? width[c] - r[c].size() + 2 : 0, ' ');
    os << line << "\n";
  }
  int64_t activations = 0;
  for (const auto& l : layers) activations += l.output_bytes;
  const LayerSummary& all = layers.front();
  os << "params: " << grouped(all.params) << " (" << grouped(all.trainable_params) << " trainable), "
     << human_bytes(all.param_bytes) << "\n";
  os << "one forward of " << shape_str(input_shape) << ": " << human_bytes(activations) << " of layer outputs\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const ModelSummary& s) { return os << s.table(); }

}  // namespace volt::utils
