// Traces and autograd graphs as DOT (jit/inspect/dot.h): the structure of the graph
// is checked against the trace it draws, line by line.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>
#include <sstream>

#include <volt/autograd/node.h>
#include <volt/jit/inspect/dot.h>
#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The lines of the cluster whose id is `cluster`, up to its closing brace.
std::vector<std::string> cluster_lines(const std::string& dot, const std::string& cluster) {
  std::istringstream in(dot);
  std::vector<std::string> r;
  int depth = 0;
  for (std::string line; std::getline(in, line);) {
    if (depth == 0 && line.find("subgraph " + cluster + " {") != std::string::npos) {
      depth = 1;
      continue;
    }
    if (depth == 0) continue;
    if (line.find("subgraph ") != std::string::npos) ++depth;
    if (line.find_first_not_of(' ') != std::string::npos && line.substr(line.find_first_not_of(' ')) == "}") {
      if (--depth == 0) break;
    }
    r.push_back(line);
  }
  return r;
}

std::vector<Tensor> fn(const std::vector<Tensor>& in) { return {relu(in[0] * in[1] + 1.0).sum()}; }

}  // namespace

TEST_CASE("dot: a trace's fused region is a cluster holding exactly its prims") {
  auto f = jit::jit(fn, {"x", "w"});
  f({Tensor::randn({4, 3}), Tensor::randn({4, 3})});
  const jit::Trace& t = jit::last_traces(f).back();
  const std::string dot = t.to_dot();
  CHECK(dot.rfind("digraph", 0) == 0);
  size_t fusions = 0;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const jit::BoundSymbol& b = t.bsyms[i];
    if (!b.is_fusion()) {
      CHECK(dot.find("  b" + std::to_string(i) + " [shape=box") != std::string::npos);
      continue;
    }
    ++fusions;
    std::vector<std::string> lines = cluster_lines(dot, "cluster_b" + std::to_string(i));
    REQUIRE_FALSE(lines.empty());
    CHECK(lines[0].find("label=\"" + b.fusion_name + " (cpu-fusion)\"") != std::string::npos);
    // One node per prim, in order, each named like the prim's printed call.
    size_t nodes = 0;
    for (const std::string& l : lines) {
      // An edge inside a cluster would pull its producer into the frame.
      CHECK_MESSAGE(l.find(" -> ") == std::string::npos, "an edge inside " << b.fusion_name << ": " << l);
      if (l.find("[shape=box") != std::string::npos) {
        REQUIRE(nodes < b.subsymbols.size());
        const std::string op = std::string("prims.") + op_name(b.subsymbols[nodes].call.op);
        CHECK_MESSAGE(l.find(op) != std::string::npos, l << " should draw " << op);
        CHECK(l.find("b" + std::to_string(i) + "_" + std::to_string(nodes) + " ") != std::string::npos);
        ++nodes;
      }
    }
    CHECK(nodes == b.subsymbols.size());
  }
  CHECK(fusions >= 1);
  // Both inputs are ellipses named as the signature names them.
  CHECK(count(dot, "shape=ellipse") == 2);
  CHECK(dot.find("label=\"x\\ncpu f32[4, 3]\"") != std::string::npos);
  CHECK(dot.find("label=\"w\\ncpu f32[4, 3]\"") != std::string::npos);
  // One edge per tensor argument of every drawn op (fused prims count one by one), plus the return.
  size_t edges = 0;
  for (const jit::BoundSymbol& b : t.bsyms) {
    const auto parts = !b.is_fusion() ? std::vector<jit::BoundSymbol>{b} : b.subsymbols;
    for (const jit::BoundSymbol& p : parts) edges += jit::tensor_args(p).size();
  }
  CHECK(count(dot, " -> ") == edges + t.outputs.size());
}

TEST_CASE("dot: values saved for backward are marked in the forward and the backward graph") {
  auto f = jit::jit(fn, {"x", "w"});
  Tensor x = Tensor::randn({4, 3}).requires_grad_();
  f({x, Tensor::randn({4, 3})})[0].backward();
  const jit::Trace& fwd = jit::last_traces(f).back();
  const jit::Trace& bwd = jit::last_backward_traces(f).back();
  REQUIRE(fwd.kind == jit::Trace::Kind::AugmentedForward);
  const size_t saved = fwd.outputs.size() - fwd.split;
  REQUIRE(saved > 0);
  CHECK(count(fwd.to_dot(), "(saved for backward)") == saved);
  CHECK(count(bwd.to_dot(), "(saved for backward)") == bwd.split);
  CHECK(bwd.split == saved);
}

TEST_CASE("dot: sections frame their bound symbols") {
  auto f = jit::jit(fn, {"x", "w"});
  f({Tensor::randn({2, 2}), Tensor::randn({2, 2})});
  const jit::Trace& t = jit::last_traces(f).back();
  REQUIRE(t.bsyms.size() >= 2);
  jit::DotOptions o;
  o.sections.assign(t.bsyms.size(), "optimizer");
  o.sections[0] = "forward";
  const std::string dot = jit::to_dot(t, o);
  CHECK(count(dot, "subgraph cluster_section") == 2);
  std::vector<std::string> first = cluster_lines(dot, "cluster_section0");
  REQUIRE_FALSE(first.empty());
  CHECK(first[0].find("label=\"forward\"") != std::string::npos);
  std::string body;
  for (const std::string& l : first) body += l + "\n";
  CHECK(body.find(" b0") != std::string::npos);
  CHECK(body.find(" b1 ") == std::string::npos);
  CHECK(body.find(" -> ") == std::string::npos);
}

TEST_CASE("dot: the eager autograd graph of a loss, like torchviz") {
  manual_seed(1);
  Tensor w = Tensor::randn({3}).requires_grad_();
  Tensor b = Tensor::randn({3}).requires_grad_();
  Tensor loss = (w * w + b).sum();
  const std::string dot = jit::to_dot(loss, {{"w", w}, {"b", b}});
  CHECK(count(dot, "label=\"sum_backward\"") == 1);
  CHECK(count(dot, "label=\"mul_backward\"") == 1);
  CHECK(count(dot, "label=\"add_backward\"") == 1);
  // Leaves by name; w feeds mul twice (one edge per input of the node).
  CHECK(dot.find("label=\"w\\ncpu f32[3]\"") != std::string::npos);
  CHECK(dot.find("label=\"b\\ncpu f32[3]\"") != std::string::npos);
  // mul's rule reads both arguments; add's reads neither.
  CHECK(count(dot, "label=\"saved\\n") == 2);
  // 3 node-to-node or leaf edges: mul<-w (x2), add<-mul, add<-b, sum<-add; 2 saved edges; root.
  CHECK(count(dot, " -> ") == 5 + 2 + 1);
  CHECK(jit::to_dot(w).find("n0") == std::string::npos);  // a leaf has no graph
}

TEST_CASE("dot: escaping and the SVG") {
  CHECK(jit::dot_escape("a \"b\" \\ c\nd") == "a \\\"b\\\" \\\\ c\\nd");
  auto f = jit::jit(fn, {"x", "w"});
  f({Tensor::randn({4, 3}), Tensor::randn({4, 3})});
  const std::string dot = jit::last_traces(f).back().to_dot();
  std::string error;
  const std::string svg = jit::dot_to_svg(dot, &error);
  if (!jit::graphviz_available()) {
    CHECK(svg.empty());
    CHECK(error.find("not installed") != std::string::npos);
    MESSAGE("skipped the SVG check: Graphviz's dot is not installed");
    return;
  }
  REQUIRE_MESSAGE(!svg.empty(), error);
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("cpuFusion0") != std::string::npos);  // the cluster's label is drawn
  CHECK(jit::dot_to_svg("digraph { a -> }", &error).empty());
  CHECK(error.find("dot failed") != std::string::npos);
}

TEST_CASE("dot: a dot that runs past its time limit is stopped, with the reason") {
  // A stand-in `dot` that never finishes, first on PATH.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("volt-slow-dot-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream script(dir / "dot");
    script << "#!/bin/sh\nexec sleep 30\n";
  }
  fs::permissions(dir / "dot", fs::perms::owner_all);
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", (dir.string() + ":" + saved).c_str(), 1);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string svg = jit::dot_to_svg("digraph { a -> b }", &error, 0.3);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::setenv("PATH", saved.c_str(), 1);
  fs::remove_all(dir);
  CHECK(svg.empty());
  CHECK_MESSAGE(error.find("longer than 0.3 s") != std::string::npos, error);
  CHECK(seconds < 10);  // stopped, not waited for (the stand-in sleeps 30 s)
}
