// volt_mpi_tests: volt::dist and data-parallel training, run by tests/mpi/run.sh
// under `mpirun -np 2`.  Every rank runs every test case in the same order
// (their collectives must match).  `--abort-test` instead runs a program in
// which rank 1 throws while rank 0 waits in an all-reduce: the run must end
// with rank 1's message, not hang; `--return-test`, one in which rank 1
// catches its error and returns while rank 0 goes on to an all-reduce.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/skip.h"

#include <cstring>
#include <iostream>

#include <volt/nn/parallel/dist.h>

int main(int argc, char** argv) {
  volt::dist::init();
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--abort-test") == 0) {
      volt::Tensor t = volt::Tensor::ones({4});
      if (volt::dist::rank() == 1) throw volt::Error("rank 1 fails on purpose in the abort test");
      for (;;) volt::dist::all_reduce(t);  // waits for rank 1 forever unless the run is aborted
    } else if (std::strcmp(argv[i], "--return-test") == 0) {
      // Rank 1 catches its error and returns from main after one all-reduce;
      // rank 0 goes on to a second one, which rank 1 never joins.
      volt::Tensor t = volt::Tensor::ones({4});
      volt::dist::all_reduce(t);
      if (volt::dist::rank() == 1) {
        try {
          throw volt::Error("rank 1 fails on purpose in the return test");
        } catch (const volt::Error& e) {
          std::cerr << "rank 1 caught: " << e.what() << "\n";
          return 3;
        }
      }
      for (;;) volt::dist::all_reduce(t);
    }
  doctest::Context ctx(argc, argv);
  // Both ranks check everything; rank 0 alone reports passing runs.
  if (volt::dist::rank() != 0) ctx.setOption("minimal", true);
  const int rc = ctx.run();
  if (volt::dist::rank() == 0 && !ctx.shouldExit()) volt::testing::print_skips();
  return rc;
}
