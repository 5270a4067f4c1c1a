// Command lines parsed with CLI11 (header-only; this header needs <CLI/CLI.hpp>
// and is not part of <volt/volt.h>), as volt's example programs parse theirs:
//
//   CLI::App app{"Trains an MLP on MNIST", "mnist_mlp"};
//   volt::utils::cli::setup(app);
//   app.add_option("--epochs", epochs, "training epochs")->capture_default_str()->check(volt::utils::cli::count(0));
//   volt::utils::cli::parse(app, argc, argv);
//
// The usage shows a type name per option ("--epochs N", "--lr X", "--data-dir
// TEXT") and the default in the description; a bad value says what was
// expected ("--epochs: expected an integer >= 0, got 'two'"); an unknown flag
// close to a known one gets "did you mean --epochs?"; every usage error exits
// with status 2 (--help with 0).
#pragma once
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace volt::utils::cli {

// "N" for integers, "X" for numbers, "TEXT" for the rest, as the usage shows them.
inline std::string metavar(const CLI::Option* opt) {
  const std::string type = opt->get_type_name().substr(0, opt->get_type_name().find(':'));
  if (type == "INT" || type == "UINT") return "N";
  if (type == "FLOAT") return "X";
  return type.empty() ? "VALUE" : type;
}

class Formatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    if (opt->get_type_size() == 0 || opt->get_type_name().empty()) return "";  // a flag
    std::string s = " " + metavar(opt);
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) s += " ...";
    if (opt->get_required()) s += " (required)";
    return s;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    const std::string d = opt->get_description();
    if (opt->get_type_size() == 0 || opt->get_type_name().empty() || opt->get_default_str().empty()) return d;
    return d + " (default " + opt->get_default_str() + ")";
  }
};

// The edit distance between two flags (insertions, deletions, substitutions).
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The app's long flag nearest to `given` ("--epoch" -> "--epochs"), or "" when
// none is within a third of its length (at least 1, at most 3 edits).
inline std::string closest_flag(const CLI::App& app, std::string given) {
  given = given.substr(0, given.find('='));
  if (given.rfind("--", 0) != 0) return "";
  const size_t limit = std::clamp<size_t>((given.size() - 2) / 3, 1, 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames()) {
      const size_t d = edit_distance(given, "--" + name);
      if (d < best_d) best_d = d, best = "--" + name;
    }
  return best;
}

// Checks for an integer in [lo, hi] / a number above zero, named in the message.
inline CLI::Validator count(int64_t lo, int64_t hi = INT64_MAX) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc() && end == s.data() + s.size() && v >= lo && v <= hi) return "";
        const std::string range = hi == INT64_MAX ? ">= " + std::to_string(lo)
                                                  : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return "expected an integer " + range + ", got '" + s + "'";
      },
      "");
}
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size() && v > 0 && v < 1e300) return "";
        return "expected a number > 0, got '" + s + "'";
      },
      "");
}

// Checks for one of `names`: "expected one of mlp, cnn, got 'rnn'".
inline CLI::Validator one_of(std::vector<std::string> names) {
  return CLI::Validator(
      [names](std::string& s) -> std::string {
        if (std::find(names.begin(), names.end(), s) != names.end()) return "";
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        return "expected one of " + list + ", got '" + s + "'";
      },
      "");
}

// The items of a comma-separated list ("8,64,256"), empty items skipped.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

// Checks a comma-separated list whose every item passes `item`.
inline CLI::Validator each(CLI::Validator item) {
  return CLI::Validator(
      [item](std::string& s) -> std::string {
        const std::vector<std::string> items = split_list(s);
        if (items.empty()) return "expected a comma-separated list, got '" + s + "'";
        for (std::string i : items)
          if (std::string m = item(i); !m.empty()) return m;
        return "";
      },
      "");
}

inline void setup(CLI::App& app) { app.formatter(std::make_shared<Formatter>()); }

// "PROGRAM: MESSAGE" and where the options are listed, as a usage error prints it.
inline std::string usage_error_text(const CLI::App& app, const std::string& message) {
  return app.get_name() + ": " + message + "\n(--help lists the options)\n";
}

// The same on standard error; exit status 2.
[[noreturn]] inline void usage_error(const CLI::App& app, const std::string& message) {
  std::cerr << usage_error_text(app, message);
  std::exit(2);
}

// What parsing a command line came to: go on (status -1), or print `text` (the
// usage for --help, status 0; a usage error, status 2) and exit with `status`.
struct Outcome {
  int status = -1;
  std::string text;
};

// Parses the command line without printing or exiting (tests call this).
inline Outcome try_parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return {0, app.help()};
  } catch (const CLI::CallForAllHelp&) {
    return {0, app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::ExtrasError& e) {
    std::string message = e.what();
    for (const std::string& extra : app.remaining()) {
      const std::string near = closest_flag(app, extra);
      if (!near.empty()) {
        message = "unknown option " + extra + "; did you mean " + near + "?";
        break;
      }
    }
    return {2, usage_error_text(app, message)};
  } catch (const CLI::ParseError& e) {
    return {2, usage_error_text(app, e.what())};
  }
  return {};
}

// Prints what try_parse's outcome says to and exits with its status, if it has one.
inline void finish(const Outcome& outcome) {
  if (outcome.status < 0) return;
  (outcome.status == 0 ? std::cout : std::cerr) << outcome.text;
  std::exit(outcome.status);
}

// Parses the command line; --help prints the usage and exits 0, a usage error exits 2.
inline void parse(CLI::App& app, int argc, char** argv) { finish(try_parse(app, argc, argv)); }

}  // namespace volt::utils::cli
