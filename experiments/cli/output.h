// What the `gengraph` command line writes (experiments/cli/cli.cpp): standard output written and
// checked, outputs that never replace inputs, and the streamed-token printers.
#pragma once

#include <gengraph/stream.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "experiments/results/table.h"
#include "framework/text/tokenizer.h"

namespace gengraph {
struct ExperimentConfig;
}  // namespace gengraph

namespace gengraph::cli {

// The standard output after this command's writes: flushed, and a failed write (a full disk, a
// closed stdout) is an error naming the system's reason (`write_errno` when the write that failed
// set it), followed by `note`.
void check_stdout(const std::string& note = "", int write_errno = 0);

// Writes `text` (a table) to stdout and checks that it got there.
void print(const std::string& text, const std::string& note = "");

// Whether `path` lies in (or is) the folder `folder`, both made absolute and normal.
bool inside_folder(const std::filesystem::path& path, const std::filesystem::path& folder);

// Outputs never replace inputs: the experiment file, or a file of the model folder (its
// config.json, weights or tokenizer). `what` names the output ("results", "plot").
void check_not_an_input(const std::string& what, const std::string& path,
                        const ExperimentConfig& c);

// Prints streamed tokens to stdout as they arrive: one line per step, each token as
// [input] or [input.sequence] followed by the id. The line ends once every sequence streamed has
// had its last token, so what the run logs next starts a line of its own.
class StreamPrinter {
 public:
  void operator()(const StreamedToken& t) {
    if (t.step != step_) {
      if (step_ >= 0) std::cout << "\n";
      std::cout << "step " << t.step << ":";
      step_ = t.step;
    }
    std::cout << " [" << t.input;
    if (t.sequence > 0) std::cout << "." << t.sequence;
    std::cout << "] " << t.token << std::flush;
    open_.insert({t.input, t.sequence});
    if (t.last) open_.erase({t.input, t.sequence});
    if (open_.empty()) finish();
  }
  void finish() {
    if (step_ >= 0) std::cout << "\n" << std::flush;
    step_ = -1;
  }

 private:
  int64_t step_ = -1;
  std::set<std::pair<int64_t, int64_t>> open_;  // (input, sequence) streamed and not ended
};

// Prints the text of streamed tokens as it becomes final (framework/text/tokenizer.h's TextStream):
// one prompt as running text; several, one line per piece, "[input] " or "[input.sequence] " and
// the piece as a JSON string, then, when the tokens have log-probabilities (output_scores or
// top_logprobs), those of the tokens the piece completed, as a JSON list. Control characters
// other than line breaks are shown escaped. Special tokens are left out with skip_special_tokens;
// a character the length limit cut is not shown.
class TextStreamPrinter {
 public:
  TextStreamPrinter(std::unique_ptr<Tokenizer> tokenizer, bool running, bool skip_special = false)
      : tokenizer_(std::move(tokenizer)), running_(running), skip_special_(skip_special) {}
  void operator()(const StreamedToken& t) {
    auto it = streams_.find({t.input, t.sequence});
    if (it == streams_.end()) {
      it = streams_
               .emplace(std::make_pair(t.input, t.sequence), TextStream(*tokenizer_, skip_special_))
               .first;
    }
    auto& held = logprobs_[{t.input, t.sequence}];
    if (!std::isnan(t.logprob)) held.push_back(t.logprob);
    show(t.input, t.sequence, it->second.push(t.token));
    if (t.last) ended_.insert({t.input, t.sequence});
    // Every sequence ended: its text is complete, and the line ends before the run logs more.
    if (ended_.size() == streams_.size()) finish();
  }
  void finish() {
    for (auto& [key, stream] : streams_) show(key.first, key.second, stream.finish());
    if (running_ && !streams_.empty()) std::cout << "\n" << std::flush;
    streams_.clear();
    ended_.clear();
    logprobs_.clear();
  }

 private:
  void show(int64_t input, int64_t sequence, const std::string& piece) {
    if (piece.empty()) return;
    auto& held = logprobs_[{input, sequence}];
    const nlohmann::json logprobs = held;
    held.clear();
    if (running_ && sequence == 0) {
      std::cout << terminal_text(piece, /*keep_line_breaks=*/true) << std::flush;
      return;
    }
    std::cout << "[" << input;
    if (sequence > 0) std::cout << "." << sequence;
    std::cout << "] " << terminal_text(nlohmann::json(piece).dump());
    if (!logprobs.empty()) std::cout << " " << logprobs.dump();
    std::cout << "\n" << std::flush;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  bool running_;
  bool skip_special_;
  std::map<std::pair<int64_t, int64_t>, TextStream> streams_;
  std::set<std::pair<int64_t, int64_t>> ended_;  // (input, sequence) whose last token came
  // The log-probabilities of each sequence's tokens since its last piece was shown.
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> logprobs_;
};

}  // namespace gengraph::cli
