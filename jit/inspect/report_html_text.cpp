// Text helpers of the jit report (jit/inspect/report.h): HTML escaping and the line
// diff between two passes' traces.
#include <volt/jit/inspect/report.h>

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace volt::jit {

std::string html_escape(const std::string& s) {
  std::string r;
  r.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&quot;"; break;
      case '\'': r += "&#39;"; break;
      default: r += c;
    }
  }
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> r;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

std::string line_diff(const std::string& before, const std::string& after, size_t context) {
  const std::vector<std::string> a = lines_of(before), b = lines_of(after);
  const size_t n = a.size(), m = b.size();
  // Longest common subsequence of lines, filled from the ends.
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::vector<std::string> out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out.push_back("  " + a[i]);
      ++i, ++j;
    } else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      out.push_back("+ " + b[j++]);
    } else {
      out.push_back("- " + a[i++]);
    }
  }
  // Long unchanged runs shrink to their edges.
  std::string r;
  for (size_t k = 0; k < out.size();) {
    if (out[k][0] != ' ') {
      r += out[k++] + "\n";
      continue;
    }
    size_t e = k;
    while (e < out.size() && out[e][0] == ' ') ++e;
    const size_t run = e - k;
    const size_t head = k == 0 ? 0 : context, tail = e == out.size() ? 0 : context;
    if (run > head + tail + 1) {
      for (size_t q = k; q < k + head; ++q) r += out[q] + "\n";
      r += "@@ " + std::to_string(run - head - tail) + " unchanged lines @@\n";
      for (size_t q = e - tail; q < e; ++q) r += out[q] + "\n";
    } else {
      for (size_t q = k; q < e; ++q) r += out[q] + "\n";
    }
    k = e;
  }
  return r;
}

}  // namespace volt::jit
