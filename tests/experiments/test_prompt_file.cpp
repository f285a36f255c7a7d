// Prompts from a file: the reader (experiments/experiment/prompt_file.h), gengraph generate
// --prompts FILE with its JSON Lines output and --resume, and an experiment's inputs: {file: ...}.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "experiments/experiment/prompt_file.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using namespace testing::cli_names;  // NOLINT(build/namespaces)
using testing::error_of;

std::string read_error(const fs::path& file, const std::string& text) {
  write_file(file, text);
  return error_of([&] { read_prompt_file(file.string()); });
}

size_t lines_in(const fs::path& file) {
  std::ifstream in(file);
  return static_cast<size_t>(
      std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
}

TEST(PromptFile, ReadsTextLinesAndJsonLines) {
  TempDir dir;
  write_file(dir / "p.txt", "first prompt\r\n\n  \nsecond {\"prompt\": 1}\n");
  PromptFile f = read_prompt_file((dir / "p.txt").string());
  EXPECT_FALSE(f.jsonl);
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[0].text, "first prompt");
  EXPECT_EQ(f.lines[1].line, 4);
  // JSON Lines by its extension or its first line: texts, token ids, conversations, settings.
  write_file(dir / "p.data",
             "{\"prompt\": \"hello\", \"id\": \"a\", \"max_new_tokens\": 3, \"seed\": 7}\n"
             "\n{\"prompt\": [1, 2], \"temperature\": 0.5, \"do_sample\": true}\n"
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
             "\"skip_special_tokens\": false}\n");
  f = read_prompt_file((dir / "p.data").string());
  EXPECT_TRUE(f.jsonl);
  ASSERT_EQ(f.lines.size(), 3u);
  EXPECT_EQ(f.lines[0].id, "a");
  EXPECT_EQ(f.lines[0].seed, 7u);
  EXPECT_EQ(f.lines[0].settings, nlohmann::json({{"max_new_tokens", 3}}));
  EXPECT_EQ(f.lines[1].ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.lines[1].line, 3);
  EXPECT_EQ(f.lines[2].prompt()[0]["content"], "hi");
  EXPECT_EQ(f.lines[2].skip_special_tokens, false);
}

// Every bad line is refused naming the file, the line, what was expected and what was found.
TEST(PromptFile, RefusesBadLinesByNumber) {
  TempDir dir;
  const fs::path j = dir / "p.jsonl";
  const std::string at = "'" + j.string() + "' line 2: ";
  const std::string ok = "{\"prompt\": [1]}\n";
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": [1],}\n"),
              HasSubstr(at + "expected a JSON object (JSON Lines: one per line), found text that "
                             "is not JSON (column 16: syntax error while parsing object key"));
  EXPECT_THAT(read_error(j, ok + "[1, 2]\n"), HasSubstr(at + "expected a JSON object"));
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": [1], \"tempreature\": 1}\n"),
              HasSubstr(at + "unknown key 'tempreature' (did you mean 'temperature'?)"));
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": [1], \"temperature\": -1}\n"),
              HasSubstr(at + "'temperature': expected a number > 0, found -1"));
  EXPECT_THAT(read_error(j, ok + "{\"id\": 3}\n"),
              HasSubstr(at + "expected exactly one of 'prompt' (a text or token ids) and "
                             "'messages' (a conversation), found neither"));
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": [1, -2]}\n"),
              HasSubstr(at + "key 'prompt': item 1: expected a non-negative integer token id, "
                             "found -2"));
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": \"\"}\n"),
              HasSubstr(at + "key 'prompt': expected a non-empty text or a non-empty list of "
                             "token ids, found the string \"\""));
  EXPECT_THAT(read_error(j, ok + "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n"),
              HasSubstr(at + "key 'messages[0].role': expected 'system', 'user' or 'assistant'"));
  EXPECT_THAT(read_error(j, "{\"prompt\": [1], \"id\": 1}\n{\"prompt\": [2], \"id\": 1}\n"),
              HasSubstr(at + "key 'id': expected an id of its own, found 1, the id of an earlier "
                             "line"));
  EXPECT_THAT(read_error(j, ok + "{\"prompt\": [1], \"seed\": -1}\n"),
              HasSubstr(at + "key 'seed': expected a non-negative integer, found -1"));
  EXPECT_THAT(read_error(dir / "p.txt", "fine\ncaf\xe9\n"),
              HasSubstr("p.txt' line 2: expected UTF-8 text, found bytes that are not valid"));
  EXPECT_THAT(read_error(dir / "p.txt", "\n \n"),
              HasSubstr("expected at least one prompt, found only blank lines"));
  EXPECT_THAT(read_error(dir / "missing.txt", ""), HasSubstr("missing.txt"));
}

// A bad line is refused before anything is written, also by a run that would resume: the output
// stays as it was (absent, or the lines an earlier run wrote).
TEST(PromptFileCli, BadInputWritesNothing) {
  TempDir dir;
  const std::string out = (dir / "out.jsonl").string();
  write_file(dir / "p.jsonl", "{\"prompt\": [1, 2]}\n{\"prompt\": [3], \"max_new_tokens\": 2}\n");
  auto [rc, err] = testing::cli_stderr({"generate", "--model", "gpt2-tiny", "--prompts",
                                        (dir / "p.jsonl").string(), "--max-new-tokens", "3",
                                        "--output", out, "--quiet"});
  ASSERT_EQ(rc, 0) << err;
  const std::string written = testing::read_file(out);
  ASSERT_EQ(lines_in(out), 2u);
  const auto first = nlohmann::json::parse(written.substr(0, written.find('\n')));
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["prompt"], nlohmann::json({1, 2}));
  EXPECT_EQ(first["tokens"].size(), 3u);
  EXPECT_EQ(first["finish_reason"], "length");
  EXPECT_EQ(first["prompt_tokens"], 2);
  EXPECT_FALSE(first.contains("text"));  // token ids in, token ids out

  // A line whose settings cannot be planned (past the context), found once the model is loaded.
  write_file(dir / "bad.jsonl",
             "{\"prompt\": [1, 2]}\n{\"prompt\": [3], \"max_new_tokens\": 5000}\n");
  for (const bool resume : {false, true}) {
    std::vector<std::string> args = {
        "generate", "--model", "gpt2-tiny", "--prompts", (dir / "bad.jsonl").string(),
        "--output", out,       "--quiet"};
    if (resume) args.push_back("--resume");
    std::tie(rc, err) = testing::cli_stderr(args);
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("bad.jsonl' line 2: the longest prompt (1 tokens) plus 5000 new "
                               "tokens exceeds the model's context"));
    EXPECT_EQ(testing::read_file(out), written);
  }
  // A file that is not this prompt file's output is not resumed.
  write_file(dir / "other.jsonl", "{\"prompt\": [7, 7]}\n{\"prompt\": [3]}\n");
  std::tie(rc, err) =
      testing::cli_stderr({"generate", "--model", "gpt2-tiny", "--prompts",
                           (dir / "other.jsonl").string(), "--output", out, "--resume", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("out.jsonl' line 1: the prompt of index 0 differs from '"));
  EXPECT_EQ(testing::read_file(out), written);
  // Usage: --resume needs an output; the output is never the prompt file.
  std::tie(rc, err) = testing::cli_stderr(
      {"generate", "--model", "gpt2-tiny", "--prompts", (dir / "p.jsonl").string(), "--resume"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("--resume: applies to --prompts FILE with --output FILE"));
  std::tie(rc, err) =
      testing::cli_stderr({"generate", "--model", "gpt2-tiny", "--prompts",
                           (dir / "p.jsonl").string(), "--output", (dir / "p.jsonl").string()});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("is the prompt file; outputs never replace inputs"));
}

// An experiment reads a file of token ids or texts as its prompts; lines with settings of their
// own are for gengraph generate --prompts.
TEST(PromptFileCli, AnExperimentTakesAPromptFile) {
  TempDir dir;
  write_file(dir / "p.jsonl", "{\"prompt\": [1, 2]}\n{\"prompt\": [3]}\n");
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {file: \"" +
                                 (dir / "p.jsonl").string() +
                                 "\"}\ngeneration: {max_new_tokens: 2}\n"
                                 "run: {warmup: 0, repeats: 1}\n");
  ASSERT_EQ(testing::run_quietly(dir / "e.yaml", dir / "r.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "r.json"));
  EXPECT_EQ(doc["inputs"]["batch_size"], 2);
  write_file(dir / "p.jsonl", "{\"prompt\": [1, 2]}\n{\"prompt\": [3], \"temperature\": 0.5}\n");
  auto [rc, err] = testing::cli_stderr({"run", (dir / "e.yaml").string(), "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("inputs.file: '" + (dir / "p.jsonl").string() +
                             "' line 2: settings of its own; an experiment's prompts share its "
                             "generation: block"));
  write_file(dir / "p.txt", "a text\n");
  std::tie(rc, err) = testing::cli_stderr(
      {"validate", (dir / "e.yaml").string(), "--set", "inputs.file=" + (dir / "p.txt").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("inputs.file (texts): needs model.path"));
}

// gengraph generate --prompts on 10,000 prompts, stopped by SIGINT about halfway and resumed,
// gives the very file an uninterrupted run gives. One thread: the run takes about a second.
TEST(PromptFileCli, StoppedHalfwayAndResumedGivesTheSameFile) {
  const fs::path gengraph = testing::cli_binary();
  if (gengraph.empty()) GTEST_SKIP() << "build/gengraph is not built beside the tests";
  TempDir dir;
  std::string prompts;
  for (int i = 0; i < 10000; ++i) {
    nlohmann::json line = {{"prompt", {1 + i % 50, 2, 3 + i % 7}}};
    if (i % 1000 == 7) line["id"] = "sampled-" + std::to_string(i);
    if (i % 1000 == 7) line["do_sample"] = true;
    if (i % 2000 == 7) line["seed"] = i;
    prompts += line.dump() + "\n";
  }
  write_file(dir / "p.jsonl", prompts);
  const auto args = [&](const fs::path& out) {
    return std::vector<std::string>{
        "generate",         "--model", "gpt2-tiny", "--prompts",     (dir / "p.jsonl").string(),
        "--max-new-tokens", "2",       "--set",     "run.threads=1", "--output",
        out.string(),       "--quiet"};
  };
  ASSERT_EQ(testing::cli_stderr(args(dir / "whole.jsonl")).first, 0);
  ASSERT_EQ(lines_in(dir / "whole.jsonl"), 10000u);

  // The same run in a process of its own, stopped once about half its lines are there.
  const fs::path part = dir / "part.jsonl";
  std::vector<std::string> a = args(part);
  std::vector<char*> argv{const_cast<char*>(gengraph.c_str())};
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execv(gengraph.c_str(), argv.data());
    ::_exit(121);
  }
  const uintmax_t half = fs::file_size(dir / "whole.jsonl") / 2;
  int status = 0;
  bool ended = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ended = true;
      break;
    }
    std::error_code ec;
    if (fs::file_size(part, ec) > half && !ec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!ended) {
    ::kill(pid, SIGINT);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_FALSE(ended) << "the run ended before it was stopped";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  const size_t kept = lines_in(part);
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 10000u);
  // A torn last line (a stop in the middle of a write) is dropped and written again.
  {
    std::ofstream torn(part, std::ios::app);
    torn << "{\"index\": " << kept << ", \"prom";
  }
  auto [rc, err] = testing::cli_stderr([&] {
    auto r = args(part);
    r.push_back("--resume");
    return r;
  }());
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(testing::read_file(part), testing::read_file(dir / "whole.jsonl"));
}

}  // namespace
}  // namespace gengraph
