#include "framework/util/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

namespace gengraph {
namespace {

std::atomic<bool> g_quiet{false};
// Displays open now: one started inside another's work (an aoti build in a warm-up) is the one
// drawn, the outer one waits until it ends.
std::atomic<int> g_open{0};

// The terminal's width in columns (80 when it does not say).
size_t terminal_columns() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 10) return w.ws_col;
  return 80;
}

}  // namespace

void set_progress_quiet(bool quiet) {
  g_quiet.store(quiet);
  // The Python tools gengraph runs (peers, exporters) read it too (tools/heartbeat.py).
  if (quiet) setenv("GENGRAPH_PROGRESS", "0", 1);
}

ProgressMode progress_mode() {
  if (g_quiet.load()) return ProgressMode::kOff;
  if (const char* p = std::getenv("GENGRAPH_PROGRESS"); p && std::strcmp(p, "0") == 0)
    return ProgressMode::kOff;
  const char* term = std::getenv("TERM");
  const bool dumb = term != nullptr && std::strcmp(term, "dumb") == 0;
  return isatty(STDERR_FILENO) && !dumb ? ProgressMode::kTerminal : ProgressMode::kLines;
}

ProgressMode progress_mode_for(const std::ostream& log) {
  return &log == &std::cerr ? progress_mode() : ProgressMode::kOff;
}

std::chrono::milliseconds progress_period(ProgressMode mode) {
  if (const char* p = std::getenv("GENGRAPH_PROGRESS_PERIOD_MS"); p && *p) {
    char* end = nullptr;
    const long ms = std::strtol(p, &end, 10);
    if (*end == '\0' && ms >= 1 && ms <= 3600000) return std::chrono::milliseconds(ms);
  }
  return std::chrono::milliseconds(mode == ProgressMode::kTerminal ? 200 : 30000);
}

std::string progress_duration(double seconds) {
  char buf[32];
  if (seconds < 59.95) {  // what rounds to 60.0s reads as 1m00s
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (std::lround(seconds) < 3600) {
    const long s = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    const long m = std::lround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", m / 60, m % 60);
  }
  return buf;
}

LoopPosition& loop_position() {
  static LoopPosition position;
  return position;
}

std::string loop_position_text() {
  const LoopPosition& p = loop_position();
  const int64_t step = p.step.load(std::memory_order_relaxed);
  if (step == 0)
    return "prefill of " + std::to_string(p.prompt_tokens.load(std::memory_order_relaxed)) +
           " positions";
  return "token " + std::to_string(step + 1) + "/" +
         std::to_string(p.max_steps.load(std::memory_order_relaxed));
}

Progress::Progress(std::string what, int64_t total, double expected_s,
                   std::function<std::string()> detail, ProgressMode mode, std::ostream* out)
    : what_(std::move(what)),
      total_(total),
      expected_s_(expected_s),
      detail_(std::move(detail)),
      mode_(mode),
      out_(out != nullptr ? *out : std::cerr),
      start_(std::chrono::steady_clock::now()) {
  if (mode_ == ProgressMode::kOff) return;
  depth_ = ++g_open;
  thread_ = std::thread([this] { run(); });
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  --g_open;
  if (mode_ == ProgressMode::kTerminal && drawn_) out_ << "\r\033[K" << std::flush;
}

void Progress::log(std::ostream& log, const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (mode_ == ProgressMode::kTerminal && drawn_) out_ << "\r\033[K" << std::flush;
  log << line << "\n";
}

std::string Progress::text() const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done =
      std::min(done_.load(std::memory_order_relaxed), std::max<int64_t>(total_, 0));
  std::ostringstream s;
  s << what_ << ": ";
  if (total_ > 0) s << done << "/" << total_ << ", ";
  s << progress_duration(elapsed);
  if (total_ > 0 && done > 0) {
    s << ", about " << progress_duration(elapsed / done * (total_ - done)) << " left";
  } else if (expected_s_ > 0) {
    s << (elapsed < expected_s_ ? ", about " + progress_duration(expected_s_ - elapsed) + " left"
                                : ", longer than the usual " + progress_duration(expected_s_));
  }
  if (detail_) {
    const std::string d = detail_();
    if (!d.empty()) s << " (" << d << ")";
  }
  return s.str();
}

void Progress::draw(bool terminal) {
  std::string line = text();
  if (!terminal) {
    out_ << line << "\n" << std::flush;
    return;
  }
  // A bar before the text where the work has steps; a spinner where it has none.
  static const char kSpin[] = "|/-\\";
  std::string head;
  if (total_ > 0) {
    const int64_t done = std::min(done_.load(std::memory_order_relaxed), total_);
    const int64_t width = 20, filled = done * width / total_;
    head = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
  } else {
    head = std::string(1, kSpin[turn_++ % 4]) + " ";
  }
  line = head + line;
  const size_t columns = terminal_columns() - 1;
  if (line.size() > columns) line.resize(columns);
  out_ << "\r\033[K" << line << std::flush;
  drawn_ = true;
}

void Progress::run() {
  const auto period = progress_period(mode_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    if (g_open.load() == depth_) draw(mode_ == ProgressMode::kTerminal);
  }
}

}  // namespace gengraph
