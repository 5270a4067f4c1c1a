#include <volt/tensor/cross_entropy.h>

#include <volt/tensor/dispatch.h>

namespace volt {

Reduction reduction_from_string(const std::string& s, const char* op) {
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  throw Error(std::string(op) + ": unknown reduction '" + s + "'; expected 'none', 'mean' or 'sum'");
}

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

void set_cross_entropy_attrs(Attrs& at, const CrossEntropyOptions& o) {
  at.ints = {static_cast<int64_t>(o.reduction), o.ignore_index};
  at.a = o.label_smoothing;
}

CrossEntropyOptions cross_entropy_options(const Attrs& at) {
  CrossEntropyOptions o;
  if (at.ints.size() >= 2) {
    o.reduction = static_cast<Reduction>(at.ints[0]);
    o.ignore_index = at.ints[1];
    o.label_smoothing = at.a;
  }
  return o;
}

bool is_default(const CrossEntropyOptions& o) {
  const CrossEntropyOptions d;
  return o.reduction == d.reduction && o.ignore_index == d.ignore_index && o.label_smoothing == d.label_smoothing;
}

}  // namespace volt
