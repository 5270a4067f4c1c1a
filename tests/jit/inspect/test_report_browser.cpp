// The jit report in a real browser: headless Chromium opens a report page and
// the index; neither may print anything to the console (an error, a failed
// load), and each screenshot must show something.  Two pages made to fail
// (one throwing, one blank) prove the checks can fail.  Skipped, saying why,
// where Chromium is not installed (setup.sh installs Debian's `chromium`).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <volt/jit/inspect/report.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "tests/jit/inspect/report_checks.h"
#include "tests/skip.h"


using namespace volt;
namespace fs = std::filesystem;

namespace {

std::string find_browser() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    for (const char* name : {"chromium", "chromium-browser"})
      if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) return (fs::path(dir) / name).string();
  return "";
}

struct Shot {
  bool ran = false;
  std::string console;  // every console line the page printed
  std::string log;      // everything on stderr (for a failure's message)
  fs::path png;
};

// Opens `page` in a fresh headless Chromium (no network, a new profile) and screenshots it.
Shot open_in_browser(const std::string& browser, const fs::path& page, const fs::path& work) {
  static int serial = 0;
  const std::string tag = std::to_string(serial++);
  Shot s;
  s.png = work / ("shot" + tag + ".png");
  const fs::path profile = work / ("profile" + tag), log = work / ("chromium" + tag + ".log");
  std::vector<std::string> args = {browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                                   "--no-first-run", "--disable-background-networking", "--disable-component-update",
                                   "--disable-sync", "--user-data-dir=" + profile.string(), "--enable-logging=stderr",
                                   "--v=0", "--hide-scrollbars", "--window-size=1280,1600",
                                   "--screenshot=" + s.png.string(), "file://" + page.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, browser.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start " << browser);
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("chromium did not finish within 120 s on " << page.string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  s.ran = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    s.log += line + "\n";
    if (line.find(":CONSOLE") != std::string::npos) s.console += line + "\n";
  }
  return s;
}

uint32_t be32(const unsigned char* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

// Decodes an 8-bit RGB or RGBA PNG (what Chromium writes) into RGB pixels.
std::vector<uint32_t> decode_png(const fs::path& file, uint32_t* width, uint32_t* height) {
  const std::string bytes = report_checks::read(file);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  REQUIRE(bytes.size() > 33);
  REQUIRE(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  std::string idat;
  uint32_t w = 0, h = 0, channels = 0;
  for (size_t at = 8; at + 8 <= bytes.size();) {
    const uint32_t len = be32(b + at);
    const std::string type = bytes.substr(at + 4, 4);
    REQUIRE(at + 12 + len <= bytes.size());
    if (type == "IHDR") {
      w = be32(b + at + 8);
      h = be32(b + at + 12);
      REQUIRE_MESSAGE(b[at + 16] == 8, "bit depth " << int(b[at + 16]));
      REQUIRE_MESSAGE((b[at + 17] == 2 || b[at + 17] == 6), "colour type " << int(b[at + 17]));
      REQUIRE(b[at + 20] == 0);  // not interlaced
      channels = b[at + 17] == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.append(bytes, at + 8, len);
    }
    at += 12 + len;
  }
  REQUIRE((w > 0 && h > 0 && channels > 0));
  const size_t stride = size_t(w) * channels;
  std::vector<unsigned char> raw((stride + 1) * h);
  uLongf size = raw.size();
  REQUIRE(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  REQUIRE(size == raw.size());
  std::vector<unsigned char> cur(stride), prev(stride, 0);
  std::vector<uint32_t> px;
  px.reserve(size_t(w) * h);
  for (uint32_t y = 0; y < h; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* line = &raw[y * (stride + 1) + 1];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= channels ? cur[x - channels] : 0, up = prev[x], c = x >= channels ? prev[x - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = up; break;
        case 3: pred = (a + up) / 2; break;
        case 4: {
          const int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
          break;
        }
        default: FAIL("bad PNG filter " << int(filter));
      }
      cur[x] = static_cast<unsigned char>(line[x] + pred);
    }
    for (uint32_t x = 0; x < w; ++x)
      px.push_back((uint32_t(cur[x * channels]) << 16) | (uint32_t(cur[x * channels + 1]) << 8) | cur[x * channels + 2]);
    std::swap(cur, prev);
  }
  *width = w;
  *height = h;
  return px;
}

// Not blank: more than a handful of colours, and some share of the picture is not background.
bool shows_something(const fs::path& png, std::string* why) {
  uint32_t w = 0, h = 0;
  const std::vector<uint32_t> px = decode_png(png, &w, &h);
  std::set<uint32_t> colours(px.begin(), px.end());
  size_t differs = 0;
  for (uint32_t p : px) differs += p != px.front();
  std::ostringstream os;
  os << w << "x" << h << ", " << colours.size() << " colours, " << differs << " pixels differ from the corner";
  *why = os.str();
  return colours.size() >= 8 && differs * 200 >= px.size();
}

}  // namespace

TEST_CASE("report browser: headless Chromium renders the report and the index without console errors") {
  const std::string browser = find_browser();
  if (browser.empty()) {
    VOLT_SKIP("Chromium is not installed (apt-get install chromium; setup.sh does)");
  }
  const fs::path work = fs::temp_directory_path() / ("volt-report-browser-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(12, std::vector<int64_t>{16, 4}, true, 0.1);
  model->train();
  auto jm = jit::jit(model);
  cross_entropy(jm(Tensor::rand({4, 12})), Tensor::from_vector<int64_t>({1, 2, 3, 0})).backward();
  jit::write_report(jm, (work / "report").string());
  const std::vector<jit::CompileRecord> records = jit::records_of(jm);
  REQUIRE(records.size() == 1);

  // The checks themselves: a page that throws is caught, a blank page is blank.
  {
    std::ofstream(work / "throws.html") << "<!DOCTYPE html><html><body><p>probe</p><script>throw new "
                                           "Error('volt probe');</script></body></html>";
    std::ofstream(work / "blank.html") << "<!DOCTYPE html><html><body></body></html>";
    Shot bad = open_in_browser(browser, work / "throws.html", work);
    CHECK_MESSAGE(bad.console.find("volt probe") != std::string::npos, "the console check misses errors:\n" << bad.log);
    Shot blank = open_in_browser(browser, work / "blank.html", work);
    REQUIRE_MESSAGE(fs::exists(blank.png), "no screenshot:\n" << blank.log);
    std::string why;
    CHECK_MESSAGE(!shows_something(blank.png, &why), "a blank page passed as not blank: " << why);
  }
  for (const fs::path& page : {work / "report" / records[0].file, work / "report" / "index.html"}) {
    INFO(page.string());
    Shot s = open_in_browser(browser, page, work);
    CHECK_MESSAGE(s.ran, "chromium failed:\n" << s.log);
    CHECK_MESSAGE(s.console.empty(), "console output:\n" << s.console);
    REQUIRE_MESSAGE(fs::exists(s.png), "no screenshot:\n" << s.log);
    std::string why;
    CHECK_MESSAGE(shows_something(s.png, &why), "blank screenshot: " << why);
    MESSAGE("chromium rendered " << page.filename().string() << ": " << why);
  }
  fs::remove_all(work);
}
