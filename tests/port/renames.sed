# The only changes from a LibTorch program to its volt port: one per line,
# applied in order by tests/port/check_renames.sh.
s|#include <torch/torch\.h>|#include <volt/volt.h>|
s|torch::|volt::|g
