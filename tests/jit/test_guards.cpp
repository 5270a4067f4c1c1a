// Value guards: a trace that read a tensor's value is reused only for that value.
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

// The tutorial's function: the branch depends on the value of `maybe`.
std::vector<Tensor> add_two_maybe(const std::vector<Tensor>& in) {
  const Tensor& t = in[0];
  const Tensor& maybe = in[1];
  if (maybe) return {add(t, 2)};
  return {t};
}

}  // namespace

TEST_CASE("jit guards: both branches of add_two_maybe are right, each with its own cache entry") {
  auto jf = jit::jit(add_two_maybe, {"t", "maybe"});
  Tensor t = Tensor::ones({1});
  Tensor no = Tensor::from_vector<bool>({false}), yes = Tensor::from_vector<bool>({true});

  CHECK(jf({t, no}).at(0).item<float>() == 1.0f);
  CHECK(jit::cache_misses(jf) == 1);
  CHECK(jit::last_traces(jf).front().str().find("# guard: maybe.item() == 0.0") != std::string::npos);

  // The other value fails the guard and traces the other branch.
  CHECK(jf({t, yes}).at(0).item<float>() == 3.0f);
  CHECK(jit::cache_misses(jf) == 2);
  CHECK(jf.last_miss_reason() == "value of maybe is 1.0, the trace read 0.0");
  CHECK(jit::last_traces(jf).back().str().find("prims.add(t, 2)") != std::string::npos);

  // Both entries now hit.
  CHECK(jf({t, no}).at(0).item<float>() == 1.0f);
  CHECK(jf({t, yes}).at(0).item<float>() == 3.0f);
  CHECK(jit::cache_misses(jf) == 2);
  CHECK(jit::cache_hits(jf) == 2);
}

TEST_CASE("jit guards: a value computed inside the function is recomputed to check the guard") {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor s = sum(in[0]);
    if (gt(s, 0.0)) return std::vector<Tensor>{mul(in[0], 2.0)};
    return std::vector<Tensor>{neg(in[0])};
  };
  auto jf = jit::jit(fn, {"x"});
  Tensor pos = Tensor::from_vector<float>({1, 2}), neg_in = Tensor::from_vector<float>({-3, 1});
  CHECK(jf(pos).to_vector<float>() == std::vector<float>{2, 4});
  CHECK(jf(neg_in).to_vector<float>() == std::vector<float>{3, -1});
  CHECK(jit::cache_misses(jf) == 2);
  CHECK(jf(Tensor::from_vector<float>({5, 5})).to_vector<float>() == std::vector<float>{10, 10});
  CHECK(jit::cache_hits(jf) == 1);
}

TEST_CASE("jit guards: branching on a random value is refused clearly") {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor u = uniform({1}, 0.0, 1.0, DType::f32, kCPU);
    if (gt(u, 0.5)) return std::vector<Tensor>{add(in[0], 1)};
    return std::vector<Tensor>{in[0]};
  };
  auto jf = jit::jit(fn, {"x"});
  CHECK_THROWS_WITH_AS(jf(std::vector<Tensor>{Tensor::ones({1})}), doctest::Contains("depends on random numbers"), volt::Error);
}

TEST_CASE("jit cache mode None traces every call") {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{add(in[0], in[0])}; };
  auto jf = jit::jit(fn, jit::JitOptions{.executors = {}, .cache = jit::CacheMode::None}, {"x"});
  Tensor x = Tensor::ones({2});
  jf({x});
  jf({x});
  CHECK(jit::cache_misses(jf) == 2);
  CHECK(jit::cache_hits(jf) == 0);
  CHECK(jf.last_miss_reason() == "caching is off");
}

TEST_CASE("jit guards: a branch on a value keeps at most kMaxGuardedEntries entries and warns once, naming the guard") {
  // sum(x).item() > 0 reads the value: every new sum is a new guard value.
  auto fn = [](const std::vector<Tensor>& in) {
    if (sum(in[0]).item<float>() > 0) return std::vector<Tensor>{mul(in[0], 2.0)};
    return std::vector<Tensor>{neg(in[0])};
  };
  auto jf = jit::jit(fn, {"x"});
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  for (int i = 1; i <= 12; ++i) {
    Tensor x = Tensor::from_vector<float>({static_cast<float>(i), 1.0f});
    CHECK(jf(x).to_vector<float>() == std::vector<float>{2.0f * i, 2.0f});
  }
  std::cerr.rdbuf(old);
  CHECK(jit::cache_misses(jf) == 12);
  CHECK(jf.cache_entries() == jit::kMaxGuardedEntries);
  const std::string w = err.str();
  // Once, with the guard's source and the rewrite.
  CHECK(w.find("volt.jit: warning: compiled 4 times") != std::string::npos);
  CHECK(w.find("volt.jit: warning: compiled 4 times", w.find("compiled 4 times") + 1) == std::string::npos);
  CHECK(w.find("the guard reads t0.item(), where") != std::string::npos);
  CHECK(w.find("t0 = prims.sum(x, (0,), keepdim=False)") != std::string::npos);
  CHECK(w.find("bool(gt(sum(x), 0.0))") != std::string::npos);
  // The most recently used entries stay: the last value hits.
  jf(Tensor::from_vector<float>({12.0f, 1.0f}));
  CHECK(jit::cache_hits(jf) == 1);

  // The rewrite: a comparison's outcome is the guard, so one compile per branch.
  auto better = jit::jit([](const std::vector<Tensor>& in) {
    if (gt(sum(in[0]), 0.0)) return std::vector<Tensor>{mul(in[0], 2.0)};
    return std::vector<Tensor>{neg(in[0])};
  }, {"x"});
  for (int i = 1; i <= 12; ++i) better(Tensor::from_vector<float>({static_cast<float>(i), 1.0f}));
  CHECK(jit::cache_misses(better) == 1);
}
