#include <volt/jit/inspect/dot.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <volt/autograd/node.h>
#include <volt/jit/executor.h>
#include <volt/tensor/private_files.h>
#include <volt/tensor/custom_op.h>

extern char** environ;

namespace volt::jit {

std::string dot_escape(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') r += "\\n";
    else if (c != '\r') r += c;
  }
  return r;
}

namespace {

const ProxyNames* names_of(const Trace& t) {
  for (const std::vector<Tensor>* list : {&t.inputs, &t.outputs})
    for (const Tensor& x : *list)
      if (x.defined() && x.impl()->proxy_owner) return static_cast<const ProxyNames*>(x.impl()->proxy_owner);
  for (const BoundSymbol& b : t.bsyms)
    for (const Tensor& x : b.outputs)
      if (x.defined() && x.impl()->proxy_owner) return static_cast<const ProxyNames*>(x.impl()->proxy_owner);
  return nullptr;
}

// "volt.linear", "prims.gt", or an executor's operator by its own name: as the trace prints it.
std::string op_label(const BoundSymbol& b) {
  const OpCall& c = b.call;
  if (c.op == OpId::custom) return op_name(c);
  const bool prim = is_prim(c.op) && b.subsymbols.empty();
  return std::string(prim ? "prims." : "volt.") + (c.op == OpId::copy ? "contiguous" : op_name(c));
}

std::string join_names(const ProxyNames& n, const std::vector<Tensor>& ts) {
  std::string r;
  for (const Tensor& t : ts) r += (r.empty() ? "" : ", ") + n.name(t);
  return r;
}

struct TraceGraph {
  const Trace& t;
  const ProxyNames& names;
  std::ostringstream os;
  // Edges go after every node and cluster: an edge written inside a cluster
  // would pull its other end into that cluster.
  std::ostringstream edges;
  std::unordered_map<int64_t, std::string> producer;  // value id -> the DOT node that makes it
  std::unordered_set<int64_t> saved;                  // values kept for backward

  void edge_in(const Tensor& v, const std::string& to) {
    if (!v.defined()) return;
    auto it = producer.find(id_of(v));
    if (it == producer.end()) return;  // a value the trace never defines (a guard's)
    edges << "  " << it->second << " -> " << to << " [label=\"" << dot_escape(names.name(v)) << "\"";
    if (saved.count(id_of(v))) edges << ", color=\"#d9822b\"";
    edges << "];\n";
  }

  void op_node(const std::string& id, const BoundSymbol& b, const std::string& indent) {
    std::string label = (b.outputs.empty() ? "" : join_names(names, b.outputs) + " = ") + op_label(b);
    if (b.outputs.size() == 1) label.append("\n").append(b.outputs[0].meta_str());
    os << indent << id << " [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", label=\""
       << dot_escape(label) << "\"";
    if (b.executor && b.executor->name() != "eager") os << ", tooltip=\"" << dot_escape(b.executor->name()) << "\"";
    os << "];\n";
  }
};

}  // namespace

std::string to_dot(const Trace& t, const DotOptions& options) {
  const ProxyNames* names = names_of(t);
  std::ostringstream head;
  head << "digraph \"" << dot_escape(t.name) << "\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n"
       << "  edge [fontname=\"monospace\", fontsize=9];\n";
  if (!options.title.empty())
    head << "  labelloc=t;\n  label=\"" << dot_escape(options.title) << "\";\n";
  if (!names) return head.str() + "}\n";
  TraceGraph g{t, *names, {}, {}, {}, {}};
  g.os << head.str();
  // What backward receives from forward.
  if (t.kind == Trace::Kind::AugmentedForward)
    for (size_t i = t.split; i < t.outputs.size(); ++i) g.saved.insert(id_of(t.outputs[i]));
  if (t.kind == Trace::Kind::Backward)
    for (size_t i = 0; i < t.split && i < t.inputs.size(); ++i) g.saved.insert(id_of(t.inputs[i]));

  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const Tensor& in = t.inputs[i];
    // A backward trace receives saved values as inputs; a forward's saved inputs get their own note below.
    const bool s = t.kind == Trace::Kind::Backward && g.saved.count(id_of(in)) > 0;
    std::string id = "in" + std::to_string(i);
    g.os << "  " << id << " [shape=" << (s ? "note" : "ellipse") << ", style=filled, fillcolor=\""
         << (s ? "#f8c58c" : "#dbe9f7") << "\", label=\""
         << dot_escape(names->name(in) + (s ? " (saved for backward)" : "") + "\n" + in.meta_str()) << "\"];\n";
    g.producer[id_of(in)] = id;
  }

  // Sections are nested frames; a section's bound symbols are consecutive.
  std::string open_section;
  int n_sections = 0;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol& b = t.bsyms[i];
    const std::string section = i < options.sections.size() ? options.sections[i] : "";
    if (section != open_section) {
      if (!open_section.empty()) g.os << "  }\n";
      if (!section.empty())
        g.os << "  subgraph cluster_section" << n_sections++ << " {\n    label=\"" << dot_escape(section)
             << "\";\n    style=dashed;\n    color=\"#777777\";\n    fontname=\"sans-serif\";\n";
      open_section = section;
    }
    const std::string indent = open_section.empty() ? "  " : "    ";
    const std::string id = "b" + std::to_string(i);
    if (!b.is_fusion()) {
      g.op_node(id, b, indent);
      for (const Tensor& a : tensor_args(b)) g.edge_in(a, id);
      for (const Tensor& o : b.outputs) g.producer[id_of(o)] = id;
      continue;
    }
    // A fused region: its prims inside a frame named as the trace names the fusion.
    g.os << indent << "subgraph cluster_" << id << " {\n" << indent << "  label=\""
         << dot_escape(b.fusion_name + (b.executor ? " (" + b.executor->name() + ")" : "")) << "\";\n"
         << indent << "  style=filled;\n" << indent << "  fillcolor=\"#eef6e8\";\n" << indent
         << "  color=\"#5b9b3a\";\n";
    for (size_t k = 0; k < b.subsymbols.size(); ++k) {
      const std::string pid = id + "_" + std::to_string(k);
      g.op_node(pid, b.subsymbols[k], indent + "  ");
      for (const Tensor& a : tensor_args(b.subsymbols[k])) g.edge_in(a, pid);
      for (const Tensor& o : b.subsymbols[k].outputs) g.producer[id_of(o)] = pid;
    }
    g.os << indent << "}\n";
  }
  if (!open_section.empty()) g.os << "  }\n";

  // Results, then (augmented forward) each value saved for backward.
  const size_t n_results = t.kind == Trace::Kind::AugmentedForward ? t.split : t.outputs.size();
  g.os << "  ret [shape=box, style=filled, fillcolor=\"#c9e7c0\", label=\"return\"];\n";
  for (size_t i = 0; i < n_results; ++i) g.edge_in(t.outputs[i], "ret");
  for (size_t i = n_results; i < t.outputs.size(); ++i) {
    const Tensor& s = t.outputs[i];
    std::string id = "saved" + std::to_string(i - n_results);
    g.os << "  " << id << " [shape=note, style=filled, fillcolor=\"#f8c58c\", label=\""
         << dot_escape(names->name(s) + " (saved for backward)\n" + s.meta_str()) << "\"];\n";
    g.edge_in(s, id);
  }
  g.os << g.edges.str() << "}\n";
  return g.os.str();
}

std::string Trace::to_dot() const { return jit::to_dot(*this, DotOptions{}); }

// ---------------------------------------------------------------- the eager tape

std::string to_dot(const Tensor& root, const std::vector<std::pair<std::string, Tensor>>& named) {
  std::ostringstream os;
  os << "digraph autograd {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  std::unordered_map<const TensorImpl*, std::string> name_of;
  for (const auto& [n, t] : named)
    if (t.defined()) name_of[t.impl()] = n;
  os << "  root [shape=box, style=filled, fillcolor=\"#c9e7c0\", label=\""
     << dot_escape((root.defined() ? root.meta_str() : std::string("undefined")) + "") << "\"];\n";
  if (!root.defined() || !root.impl()->grad_fn) return os.str() + "}\n";

  std::map<const autograd::Node*, std::string> node_id;
  std::map<const TensorImpl*, std::string> leaf_id;
  std::vector<const autograd::Node*> stack{root.impl()->grad_fn.get()};
  node_id[stack.back()] = "n0";
  int saved_count = 0;
  while (!stack.empty()) {
    const autograd::Node* n = stack.back();
    stack.pop_back();
    const std::string& id = node_id[n];
    os << "  " << id << " [shape=box, style=\"rounded,filled\", fillcolor=\"#eeeeee\", label=\""
       << dot_escape(n->name() + (n->released ? " (released)" : "")) << "\"];\n";
    // Tensors the node's rule reads (an eager op's saved arguments).
    if (auto* op = dynamic_cast<const autograd::OpNode*>(n)) {
      for (size_t i = 0; i < op->call.args.size(); ++i) {
        const Value& v = op->call.args[i];
        if (!v.is_tensor || !v.tensor.defined() || !autograd::reads_saved_value(op->call, i, n->next)) continue;
        std::string sid = std::string(1, 's').append(std::to_string(saved_count++));
        os << "  " << sid << " [shape=note, style=filled, fillcolor=\"#f8c58c\", label=\""
           << dot_escape("saved\n" + v.tensor.meta_str()) << "\"];\n  " << sid << " -> " << id
           << " [style=dashed];\n";
      }
    }
    for (const autograd::Edge& e : n->next) {
      std::string from;
      if (e.node) {
        auto [it, fresh] = node_id.emplace(e.node.get(), std::string(1, 'n').append(std::to_string(node_id.size())));
        if (fresh) stack.push_back(e.node.get());
        from = it->second;
      } else if (e.leaf) {
        auto [it, fresh] = leaf_id.emplace(e.leaf.get(), std::string(1, 'l').append(std::to_string(leaf_id.size())));
        if (fresh) {
          Tensor leaf(e.leaf);
          auto nm = name_of.find(e.leaf.get());
          os << "  " << it->second << " [shape=box, style=filled, fillcolor=\"#dbe9f7\", label=\""
             << dot_escape((nm != name_of.end() ? nm->second + "\n" : std::string()) + leaf.meta_str()) << "\"];\n";
        }
        from = it->second;
      } else {
        continue;  // an input that needs no gradient
      }
      os << "  " << from << " -> " << id << ";\n";
    }
  }
  os << "  n0 -> root;\n}\n";
  return os.str();
}

// ---------------------------------------------------------------- Graphviz

namespace {

// The path of `program` on PATH, or "".
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::filesystem::path p = std::filesystem::path(dir) / program;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

}  // namespace

bool graphviz_available() { return !find_on_path("dot").empty(); }

std::string dot_to_svg(const std::string& dot, std::string* error, double timeout_seconds) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return std::string();
  };
  const std::string program = find_on_path("dot");
  if (program.empty()) return fail("Graphviz's dot is not installed (apt-get install graphviz)");
  namespace fs = std::filesystem;
  // Scratch files in a private directory of their own (mkdtemp, 0700): fixed
  // names in a shared /tmp could be links planted by another user.
  std::error_code ec;
  fs::path tmp_root = fs::temp_directory_path(ec);
  if (ec) tmp_root = "/tmp";
  const fs::path dir = make_private_temp_dir(tmp_root, "volt-dot-");
  if (dir.empty()) return fail("cannot make a temporary directory in " + tmp_root.string() + ": " + std::strerror(errno));
  const std::string in = (dir / "graph.dot").string(), out = (dir / "graph.svg").string(),
                    log = (dir / "dot.log").string();
  std::string why;
  if (!write_new_file(in, dot, &why)) {
    fs::remove_all(dir, ec);
    return fail(why);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> args = {program, "-Tsvg", in, "-o", out};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  bool timed_out = false;
  if (rc == 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    for (;;) {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid || (done < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string svg, messages;
  if (rc == 0) read_own_file(out, &svg);
  read_own_file(log, &messages);
  fs::remove_all(dir, ec);
  if (rc != 0) return fail("cannot start " + program + ": " + std::strerror(rc));
  if (timed_out) {
    std::ostringstream why;
    why << "dot ran longer than " << timeout_seconds << " s on a graph of " << dot.size()
        << " bytes of DOT and was stopped";
    return fail(why.str());
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || svg.empty())
    return fail("dot failed: " + (messages.empty() ? std::string("no output") : messages));
  return svg;
}

}  // namespace volt::jit
