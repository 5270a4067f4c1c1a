// The Python interpreter that can import PyTorch, for the tests that check a
// file volt wrote by reading it in PyTorch: `python3` on the PATH first, then
// the system's /usr/bin/python3 (Debian's python3-torch installs there, and a
// user's own Python, e.g. a pyenv shim, may come first on the PATH). Empty
// when neither imports torch: those tests then skip and say why.
#pragma once
#include <cstdlib>
#include <string>

namespace volt::testing {

inline const std::string& torch_python() {
  static const std::string found = [] {
    for (const char* python : {"python3", "/usr/bin/python3"}) {
      const std::string probe = std::string(python) + " -c 'import torch' >/dev/null 2>&1";
      if (std::system(probe.c_str()) == 0) return std::string(python);
    }
    return std::string();
  }();
  return found;
}

}  // namespace volt::testing
