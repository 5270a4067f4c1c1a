// The example programs' command lines (volt/utils/cli.h): type names in the
// usage, a bad value named with what was expected, "did you mean" for a close
// unknown flag, and exit status 2 for every usage error.
#include <doctest/doctest.h>

#include "run_example.h"

#include <string>

#include <volt/utils/cli.h>

namespace {

using Run = volt::testing::ExampleRun;
Run run(const std::string& command) { return volt::testing::run_example(command); }

}  // namespace

TEST_CASE("cli: the edit distance and the closest flag") {
  using namespace volt::utils::cli;
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("--epochs", "--epochs") == 0);
  CLI::App app{"test", "test"};
  int64_t epochs = 1, batch = 8;
  app.add_option("--epochs", epochs);
  app.add_option("--batch-size", batch);
  CHECK(closest_flag(app, "--epoch") == "--epochs");
  CHECK(closest_flag(app, "--epcohs=3") == "--epochs");
  CHECK(closest_flag(app, "--bacth-size") == "--batch-size");
  CHECK(closest_flag(app, "--verbose") == "");
  CHECK(closest_flag(app, "epochs") == "");  // not a flag
}

TEST_CASE("cli: the usage names each option's type, without ranges, and its default") {
  Run r = run("mnist_mlp --help");
  INFO(r.out);
  CHECK(r.status == 0);
  for (const char* s : {"--epochs N", "--batch-size N", "--lr X", "--data-dir TEXT", "(default 1)", "(default 0.001)"})
    CHECK_MESSAGE(r.out.find(s) != std::string::npos, s);
  for (const char* s : {"INT", "FLOAT", ">=", "1099511627776", "VALUE"}) CHECK_MESSAGE(r.out.find(s) == std::string::npos, s);
  CHECK(r.out.find("  --eager  ") != std::string::npos);  // a flag takes no value
  r = run("gpt --help");
  CHECK(r.status == 0);
  CHECK(r.out.find("--steps N") != std::string::npos);
  CHECK(r.out.find("--temperature X") != std::string::npos);
  CHECK(r.out.find("INT") == std::string::npos);
}

TEST_CASE("cli: a bad value says what was expected, and exits with status 2") {
  Run r = run("mnist_mlp --epochs two");
  CHECK(r.status == 2);
  CHECK(r.out.find("--epochs: expected an integer >= 0, got 'two'") != std::string::npos);
  CHECK(r.out.find("not in range") == std::string::npos);
  r = run("gpt --batch-size 0");
  CHECK(r.status == 2);
  CHECK(r.out.find("--batch-size: expected an integer >= 1, got '0'") != std::string::npos);
  r = run("mnist_mlp --lr -1");
  CHECK(r.status == 2);
  CHECK(r.out.find("--lr: expected a number > 0, got '-1'") != std::string::npos);
  r = run("extend_linear --repeats 2000000");
  CHECK(r.status == 2);
  CHECK(r.out.find("--repeats: expected an integer in [1, 1048576], got '2000000'") != std::string::npos);
}

TEST_CASE("cli: an unknown flag close to a known one gets a suggestion; every usage error exits 2") {
  Run r = run("mnist_mlp --epoch 1");
  CHECK(r.status == 2);
  CHECK(r.out.find("unknown option --epoch; did you mean --epochs?") != std::string::npos);
  r = run("gpt --n-layers 2");
  CHECK(r.status == 2);
  CHECK(r.out.find("did you mean --n-layer?") != std::string::npos);
  for (const std::string prog :
       {"mnist_mlp", "gpt", "lazy_mnist", "lazy_mnist --mlp", "extend_linear", "extend_cross_entropy"}) {
    CAPTURE(prog);
    r = run(prog + " --no-such-option-at-all");
    CHECK(r.status == 2);
    CHECK(r.out.find("did you mean") == std::string::npos);  // nothing is close
    CHECK(r.out.find("--help lists the options") != std::string::npos);
    r = run(prog + " --batch-size");  // a missing value, where the flag exists; an unknown one elsewhere
    CHECK(r.status == 2);
  }
}
