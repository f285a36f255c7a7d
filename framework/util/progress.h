// Progress of long work on standard error (issue 55): on a terminal one line redrawn in place (a
// bar and step counts where the work has steps, the elapsed time, an estimate of what is left);
// elsewhere (a file, a pipe, a job's log) a plain line every period; nothing when quiet. No
// LibTorch: any layer may show progress.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace gengraph {

enum class ProgressMode { kOff, kLines, kTerminal };

// The process's choice: kOff after set_progress_quiet(true) (the CLI's --quiet) or with
// GENGRAPH_PROGRESS=0; else kTerminal where standard error is a terminal (TERM not "dumb"),
// kLines otherwise.
void set_progress_quiet(bool quiet);
ProgressMode progress_mode();

// progress_mode() where `log` is std::cerr (the CLI's log without --quiet), else kOff: a log kept
// elsewhere (a test's, --quiet's sink) gets no display.
ProgressMode progress_mode_for(const std::ostream& log);

// Time between updates: GENGRAPH_PROGRESS_PERIOD_MS when set (1 to 3600000; tests shorten it),
// else 200 ms on a terminal and 30 s for plain lines. A display shows nothing before one period
// has passed, so short work stays silent.
std::chrono::milliseconds progress_period(ProgressMode mode);

// "12.3s", "4m05s", "2h10m".
std::string progress_duration(double seconds);

// Where the decoding loop is, published by the loop (framework/decoding) and read by a display:
// the generation now running has prompts of `prompt_tokens` positions; `step` is 0 while it
// prefills them, then the decode steps made, of at most `max_steps`. Relaxed atomics: one store a
// step. loop_position_text() says it ("prefill of 512 positions", "token 5/32").
struct LoopPosition {
  std::atomic<int64_t> prompt_tokens{0}, step{0}, max_steps{0};
  void begin(int64_t prompt, int64_t max) {
    step.store(0, std::memory_order_relaxed);
    prompt_tokens.store(prompt, std::memory_order_relaxed);
    max_steps.store(max, std::memory_order_relaxed);
  }
};
LoopPosition& loop_position();
std::string loop_position_text();

class Progress {
 public:
  // `what` names the work ("backend eager: warm-up"). `total`: its steps (0: none, the elapsed
  // time alone). `expected_s`: the whole work's usual seconds, when known (0: unknown), for an
  // estimate before any step is done. `detail`, when given, is called at each update for a text
  // shown after the figures (loop_position_text). Writes to `out` (default std::cerr).
  explicit Progress(std::string what, int64_t total = 0, double expected_s = 0,
                    std::function<std::string()> detail = {}, ProgressMode mode = progress_mode(),
                    std::ostream* out = nullptr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t steps = 1) { done_.fetch_add(steps, std::memory_order_relaxed); }
  // Stops the display; on a terminal its line is cleared (what is logged next starts clean).
  void finish();
  // Writes `line` and a newline to `log` below the display (on a terminal the display's line is
  // cleared first and drawn again at the next update).
  void log(std::ostream& log, const std::string& line);
  // The text of one update (what the display shows, without the terminal's control characters).
  std::string text() const;

 private:
  void run();
  void draw(bool terminal);

  const std::string what_;
  const int64_t total_;
  const double expected_s_;
  const std::function<std::string()> detail_;
  const ProgressMode mode_;
  std::ostream& out_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, drawn_ = false;
  int turn_ = 0;   // the spinner's
  int depth_ = 0;  // displays open when this one started, itself included
  std::thread thread_;
};

}  // namespace gengraph
