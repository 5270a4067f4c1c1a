// map_identifiers: rewrites the identifiers of a piece of C/C++ source.
//
// The code generators (the jit's fused kernels, the eager CUDA kernels) fill
// in the operands `a`, `b`, `c` and the result type `T` of an op-table
// expression with it.
//
//   map_identifiers("a + b * T(2)", [](const std::string& id) {
//     return id == "a" ? "x" : id == "b" ? "y" : id == "T" ? "float" : id;
//   });                                              // "x + y * float(2)"
//
// An identifier is a letter or underscore followed by letters, digits and
// underscores; everything else (numbers, operators, spaces) is copied as is.
// Digits are never the start of one, so in `1.0f` only `f` is offered to fn.
#pragma once
#include <cctype>
#include <string>
#include <vector>

namespace volt {

template <class Fn>
std::string map_identifiers(const std::string& src, Fn&& fn) {
  auto starts = [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)) || ch == '_'; };
  auto continues = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size();) {
    if (!starts(src[i])) {
      out += src[i++];
      continue;
    }
    size_t j = i;
    while (j < src.size() && continues(src[j])) ++j;
    out += fn(src.substr(i, j - i));
    i = j;
  }
  return out;
}

// An op-table expression (tensor/op_table.h) with its operands `a`, `b`, `c`
// and its result type `T` filled in.
inline std::string fill_op_expr(const std::string& expr, const std::vector<std::string>& operands,
                                const std::string& result_type) {
  return map_identifiers(expr, [&](const std::string& id) {
    if (id == "a" || id == "b" || id == "c") return operands.at(static_cast<size_t>(id[0] - 'a'));
    return id == "T" ? result_type : id;
  });
}

}  // namespace volt
