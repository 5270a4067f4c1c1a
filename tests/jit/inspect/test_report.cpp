// The jit report (jit/inspect/report.h), checked structurally: every pass's trace is
// on its page in order, every fused kernel is there with the source the jit
// generated, and every value a kernel names is a value of its region.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <unistd.h>

#include <volt/jit/lazy/lazy.h>
#include <volt/jit/inspect/report.h>
#include <volt/jit/step/step.h>
#include <volt/nn/gpt.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/jit/inspect/report_checks.h"

using namespace volt;
namespace fs = std::filesystem;

TEST_CASE("report: html_escape and line_diff") {
  CHECK(jit::html_escape("<a href=\"x\">&'</a>") == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  CHECK(jit::line_diff("a\nb\nc\n", "a\nc\nd\n") == "  a\n- b\n  c\n+ d\n");
  // Long unchanged runs shrink to `context` lines on each side of a change.
  std::string before, after;
  for (int i = 0; i < 20; ++i) before += std::to_string(i) + "\n";
  after = before + "new\n";
  CHECK(jit::line_diff(before, after, 2) == "@@ 18 unchanged lines @@\n  18\n  19\n+ new\n");
  CHECK(jit::line_diff("same\n", "same\n") == "  same\n");
}

TEST_CASE("report: a page per cache entry, with every pass and every kernel beside its region") {
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(12, std::vector<int64_t>{16, 8, 4}, true, 0.1);
  model->train();
  auto jm = jit::jit(model);
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 0});
  cross_entropy(jm(Tensor::rand({4, 12})), y).backward();
  cross_entropy(jm(Tensor::rand({4, 12})), y).backward();                          // a hit
  jm(Tensor::rand({2, 12}));                                                           // a new batch size: a miss
  REQUIRE(jit::cache_misses(jm) == 2);

  const fs::path dir = fs::temp_directory_path() / ("volt-report-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  jit::write_report(jm, dir.string());
  const std::vector<jit::CompileRecord> records = jit::records_of(jm);
  REQUIRE(records.size() == 2);
  const std::string index = report_checks::read(dir / "index.html");
  for (const jit::CompileRecord& r : records) {
    INFO(r.file);
    CHECK(index.find("href=\"" + r.file + "\"") != std::string::npos);
    const std::string page = report_checks::read(dir / r.file);
    report_checks::check_page(page, r);
  }
  // The first entry: why, its hit, and the second compile's reason in its own page's history.
  CHECK(records[0].reason == "first call");
  CHECK(records[0].hits == 1);
  CHECK(records[1].reason.find("input0=cpu f32[2, 12]") != std::string::npos);
  CHECK(records[1].history.size() == 2);
  const std::string second = report_checks::read(dir / records[1].file);
  CHECK(second.find(jit::html_escape(records[1].reason)) != std::string::npos);
  // Every kernel row says how its kernel was built: by the host compiler (with
  // the log's outcome), or shared with an identical region built before.
  for (const jit::CompileRecord& r : records) {
    const std::string page = report_checks::read(dir / r.file);
    size_t kernels = 0;
    for (const std::vector<jit::Trace>* list : {&r.traces, &r.backward_traces})
      if (!list->empty())
        for (const jit::BoundSymbol& b : list->back().bsyms)
          if (b.kernel) ++kernels;
    CHECK(kernels > 0);
    CHECK(report_checks::count(page, "<td>host C++ compiler: ") + report_checks::count(page, "<td>shared: ") ==
          kernels);
  }
  // The memory picture: every saved tensor with its bytes.
  const jit::Trace& fwd = records[0].traces.back();
  REQUIRE(fwd.kind == jit::Trace::Kind::AugmentedForward);
  const std::string first = report_checks::read(dir / records[0].file);
  CHECK(report_checks::count(first, "<table class=\"saved\">") == 1);
  size_t total = 0;
  for (size_t i = fwd.split; i < fwd.outputs.size(); ++i)
    total += static_cast<size_t>(fwd.outputs[i].numel()) * dtype_size(fwd.outputs[i].dtype());
  CHECK(first.find(std::to_string(fwd.outputs.size() - fwd.split) + " tensors</th><td class=\"num\">" +
                   std::to_string(total)) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("report: VOLT_JIT_REPORT's writer covers jit functions, a compiled step and lazy graphs") {
  const fs::path dir = fs::temp_directory_path() / ("volt-report-env-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  jit::set_report_dir(dir.string());
  struct Stop {  // later tests run without the report, whatever happens here
    ~Stop() { jit::set_report_dir(""); }
  } stop;
  manual_seed(0);
  auto f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] * 2.0).exp()}; });
  f({Tensor::ones({3})});
  f({Tensor::ones({3})});  // a hit adds no page

  auto net = std::make_shared<nn::MLP>(6, std::vector<int64_t>{5, 3}, true, 0.0);
  nn::Adam opt(net->parameters(), {.lr = 1e-3});
  auto step = jit::compile_step(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy((*net)(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      {.state = {*net, opt}});
  step(Tensor::rand({4, 6}), Tensor::from_vector<int64_t>({0, 1, 2, 0}));

  Tensor a = Tensor::ones({4}).to(kLazy);
  Tensor b = (a * 3.0 + 1.0).relu();
  lazy::mark_step();
  (void)b;
  jit::set_report_dir("");
  f({Tensor::ones({5})});  // after stopping: no page

  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.insert(e.path().filename().string());
  CHECK(files.count("index.html") == 1);
  CHECK(files.count("jit-f1-compile1.html") == 1);
  CHECK(files.count("jit-f1-compile2.html") == 0);
  CHECK(files.count("step1-compile1.html") == 1);
  CHECK(files.count("lazy-graph1.html") == 1);
  const std::string index = report_checks::read(dir / "index.html");
  for (const char* p : {"jit-f1-compile1.html", "step1-compile1.html", "lazy-graph1.html"})
    CHECK(index.find(p) != std::string::npos);

  // The step: one program in sections, with its memory plan's arena.
  const std::string s = report_checks::read(dir / "step1-compile1.html");
  CHECK(s.find("Memory plan: one arena of <b>" + std::to_string(step.arena_bytes())) != std::string::npos);
  for (const char* section : {"forward", "backward", "optimizer"})
    CHECK_MESSAGE(s.find("label=&quot;" + std::string(section) + "&quot;") != std::string::npos, section);
  report_checks::check_page(s, jit::record_of(step));

  // The lazy graph: its flush reason and its passes.
  const std::string l = report_checks::read(dir / "lazy-graph1.html");
  CHECK(l.find("flush: mark_step") != std::string::npos);
  jit::CompileRecord lr;
  lr.traces = lazy::last_compiled_traces();
  report_checks::check_page(l, lr);
  fs::remove_all(dir);
}

TEST_CASE("report: pages are titled by the module, keys name parameters as traces do, rewrites are explained") {
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(12, std::vector<int64_t>{16, 4}, true, 0.0);
  model->eval();
  NoGradGuard no_grad;
  auto jm = jit::jit(model);
  jm(Tensor::rand({4, 12}));
  const std::vector<jit::CompileRecord> records = jit::records_of(jm);
  REQUIRE(records.size() == 1);
  const jit::CompileRecord& r = records.front();
  CHECK(r.title.find("MLP") == 0);
  CHECK(r.key.find("_0_weight=") != std::string::npos);
  CHECK(r.key.find("param0") == std::string::npos);
  const std::string page = jit::render_page(r);
  CHECK(page.find("The rewrite <b>GEMM epilogues</b>") != std::string::npos);
  CHECK(page.find("A rewrite for speed") != std::string::npos);
}

TEST_CASE("report: a GPT's regions are grouped by layer, a repeated block's kernels one line each") {
  manual_seed(0);
  auto gpt = std::make_shared<nn::GPT>(nn::GPTConfig{.block_size = 8, .vocab_size = 32, .n_layer = 3, .n_head = 2,
                                                     .n_embd = 16});
  CHECK(gpt->blocks()->at<nn::Block>(1)->path() == "transformer.h.1");
  CHECK(gpt->path().empty());
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [n, p] : gpt->named_parameters()) {
    params.push_back(p);
    names.push_back(jit::proxy_name_for(n));
  }
  jit::JitFunction jm(
      [gpt](const std::vector<Tensor>& in) { return std::vector<Tensor>{gpt->forward(in[0], in[1]).loss}; },
      {"idx", "targets"}, params, names, [gpt] { return gpt->is_training(); });
  Tensor idx = Tensor::randint(0, 32, {2, 8}), targets = Tensor::randint(0, 32, {2, 8});
  jm({idx, targets}).at(0).backward();
  const std::vector<jit::CompileRecord> records = jit::records_of(jm);
  REQUIRE(records.size() == 1);
  const jit::CompileRecord& r = records.front();
  // Every line of the traced forward knows its module: the blocks' lines name them.
  std::set<std::string> scopes;
  for (const jit::BoundSymbol& b : r.traces.front().bsyms) scopes.insert(b.scope);
  for (const char* s : {"transformer.wte", "transformer.h.0.ln_1", "transformer.h.1.attn.c_attn", "transformer.h.2.mlp.c_fc",
                        "transformer.ln_f", "lm_head", ""})
    CHECK_MESSAGE(scopes.count(s) == 1, "no line from '" << s << "'");
  // The backward's lines have their forward lines' scopes.
  std::set<std::string> backward_scopes;
  for (const jit::BoundSymbol& b : r.backward_traces.front().bsyms) backward_scopes.insert(b.scope);
  CHECK(backward_scopes.count("transformer.h.2.mlp.c_fc") == 1);
  CHECK(backward_scopes.count("transformer.h.0.ln_1") == 1);

  const std::string page = jit::render_page(r);
  report_checks::check_page(page, r);
  for (const char* layer : {"<summary><b>transformer.h.0</b>", "<summary><b>transformer.h.1</b>",
                            "<summary><b>transformer.h.2</b>"})
    CHECK_MESSAGE(report_checks::count(page, layer) >= 1, layer);
  // Blocks 1 and 2 compute what block 0 does: none of their kernels is shown again.
  const size_t h1 = page.find("<summary><b>transformer.h.1</b>");
  const size_t after = page.find("<summary><b>", h1 + 1);
  const std::string block1 = page.substr(h1, after - h1);
  CHECK(block1.find("0 kernel(s) not shown above") != std::string::npos);
  CHECK(report_checks::count(block1, "<p class=\"repeat\"") >= 3);
  CHECK(report_checks::count(block1, "<section class=\"region\"") == 0);
  CHECK(report_checks::count(page, "<p class=\"repeat\"") > report_checks::count(page, "<section class=\"region\""));
}
