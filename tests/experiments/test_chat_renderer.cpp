// ChatRenderer (experiments/tools/chat_renderer.h): a model folder's chat template rendered by one
// long-lived tools/hf_tokenizer.py --serve process. What it renders is what transformers'
// apply_chat_template renders (asked at test time, in a Python process of its own); one process
// serves many renders, from several threads; a refused message is named and the process kept; a
// process that dies, hangs or is killed is replaced; destruction leaves no zombie.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "experiments/tools/chat_renderer.h"
#include "framework/model/known_models.h"
#include "framework/text/chat_native.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;

// ChatML-like, with the tokenizer's own EOS and a system prompt put first; a conversation whose
// first message is "spin" loops (10^10 steps), for the limits.
constexpr const char* kTemplate =
    "{% if messages[0]['content'] == 'spin' %}{% for i in range(100000) %}"
    "{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{{ eos_token "
    "}}"
    "\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

fs::path chat_folder(const TempDir& dir, const char* chat_template = kTemplate) {
  const fs::path folder = dir / "model";
  testing::make_folder_with_test_tokenizer("gpt2-a", folder, 96);
  if (chat_template != nullptr) testing::write_file(folder / "chat_template.jinja", chat_template);
  return folder;
}

nlohmann::json conversation() {
  return nlohmann::json::parse(R"([
    {"role": "system", "content": "You answer in words w2 to w95."},
    {"role": "user", "content": "w5 w6, caf\u00e9 \u2713 \ud83d\ude00"},
    {"role": "assistant", "content": "w7"},
    {"role": "user", "content": "and \"w8\"?\nw9"}])");
}

// What transformers' own apply_chat_template(tokenize=False) renders for each (messages,
// add_generation_prompt) case, in a Python process that does not use tools/hf_tokenizer.py.
std::vector<std::string> transformers_render(const TempDir& dir, const fs::path& folder,
                                             const nlohmann::json& cases) {
  testing::write_file(dir / "oracle_in.json",
                      nlohmann::json{{"folder", folder.string()}, {"cases", cases}}.dump());
  testing::write_file(dir / "oracle.py", R"(import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import AutoTokenizer
r = json.load(open(sys.argv[1]))
tok = AutoTokenizer.from_pretrained(r["folder"], local_files_only=True)
json.dump([tok.apply_chat_template(m, tokenize=False, add_generation_prompt=g) for m, g in r["cases"]],
          open(sys.argv[2], "w"))
)");
  const std::string py = std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python";
  const std::string cmd = "\"" + py + "\" \"" + (dir / "oracle.py").string() + "\" \"" +
                          (dir / "oracle_in.json").string() + "\" \"" +
                          (dir / "oracle_out.json").string() + "\"";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return nlohmann::json::parse(testing::read_file(dir / "oracle_out.json"))
      .get<std::vector<std::string>>();
}

std::string error_of(ChatRenderer& r, const nlohmann::json& messages) {
  try {
    r.render(messages, true);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Whether `pid` has ended so that waitpid reports it (all its threads gone), waiting up to 10 s;
// it is left to be reaped.
bool ended(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Reaped: no longer a child of this process.
bool reaped(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) < 0 && errno == ECHILD;
}

TEST(ChatRenderer, RendersWhatTransformersRendersWithOneProcess) {
  TempDir dir;
  const fs::path folder = chat_folder(dir);
  const nlohmann::json messages = conversation();
  const auto want = transformers_render(
      dir, folder, nlohmann::json::array({{messages, true}, {messages, false}}));
  std::ostringstream log;
  ChatRenderer r(folder.string(), log);
  EXPECT_EQ(r.pid(), 0);  // nothing started before the first render
  const std::string prompt = r.render(messages, true);
  EXPECT_EQ(prompt, want[0]);
  EXPECT_THAT(prompt, HasSubstr("<|im_start|>system\nYou answer"));
  EXPECT_EQ(r.render(messages, false), want[1]);
  const pid_t pid = r.pid();
  EXPECT_GT(pid, 0);
  EXPECT_THAT(log.str(), HasSubstr("tools/hf_tokenizer.py --serve --model " + folder.string()));

  // Several threads, one render at a time, the same process.
  std::vector<std::thread> threads;
  std::vector<int> right(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) right[t] += r.render(messages, k % 2 == 0) == want[k % 2];
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(right, std::vector<int>(4, 3));

  // A refused message is named by position and key; the process stays and renders the next.
  nlohmann::json bad = messages;
  bad[2]["role"] = "tool";
  EXPECT_EQ(error_of(r, bad),
            "messages[2]: key 'role': expected 'system', 'user' or 'assistant', found \"tool\"");
  bad = messages;
  bad[1]["content"] = 5;
  EXPECT_EQ(error_of(r, bad), "messages[1]: key 'content': expected a string, found a number");
  bad = messages;
  bad[0]["name"] = "x";
  EXPECT_EQ(error_of(r, bad),
            "messages[0]: key 'name' is not accepted (a message has 'role' and 'content')");
  EXPECT_EQ(error_of(r, nlohmann::json::array()),
            "messages: expected at least one message, found none");
  EXPECT_EQ(error_of(r, "hello"), "messages: expected an array of messages, found a string");
  EXPECT_EQ(r.render(messages, true), want[0]);
  EXPECT_EQ(r.pid(), pid);
  EXPECT_EQ(r.starts(), 1);
}

TEST(ChatRenderer, AProcessThatDiesHangsOrOverrunsIsReplacedOrStopped) {
  TempDir dir;
  const fs::path folder = chat_folder(dir);
  const std::string name = "the chat template of '" + folder.string() + "' ('" +
                           (folder / "chat_template.jinja").string() + "')";
  const nlohmann::json messages = conversation();
  const nlohmann::json spin = {{{"role", "user"}, {"content", "spin"}}};
  std::ostringstream log;
  pid_t last = 0;
  {
    ChatRenderer r(folder.string(), log);
    r.start();  // started and loaded ahead of the first render
    const pid_t first = r.pid();
    ASSERT_GT(first, 0);
    r.start();  // already running: nothing more
    EXPECT_EQ(r.starts(), 1);
    const std::string want = r.render(messages, true);

    // Killed between renders: the next render starts another process and succeeds.
    ASSERT_EQ(::kill(first, SIGKILL), 0);
    ASSERT_TRUE(ended(first));
    EXPECT_EQ(r.render(messages, true), want);
    const pid_t second = r.pid();
    EXPECT_NE(second, first);
    EXPECT_TRUE(reaped(first));
    EXPECT_EQ(r.starts(), 2);
    EXPECT_THAT(log.str(), HasSubstr("had ended (signal 9"));

    // A template past GENGRAPH_CHAT_TEMPLATE_SECONDS: stopped by the tool, named, process kept.
    {
      testing::ScopedEnv seconds("GENGRAPH_CHAT_TEMPLATE_SECONDS", "1");
      EXPECT_EQ(error_of(r, spin), name + " ran past 1 s on conversation 0");
      EXPECT_EQ(r.pid(), second);
    }

    // Killed while it renders: the render says so, with the signal; the next one succeeds.
    std::thread killer([second] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ::kill(second, SIGKILL);
    });
    const std::string died = error_of(r, spin);
    killer.join();
    EXPECT_THAT(died, HasSubstr("tools/hf_tokenizer.py --serve (pid " + std::to_string(second) +
                                ") for " + name + " ended (signal 9"));
    EXPECT_THAT(died, HasSubstr("before answering"));
    EXPECT_EQ(r.pid(), 0);
    EXPECT_TRUE(reaped(second));
    EXPECT_EQ(r.render(messages, true), want);
    const pid_t third = r.pid();

    // A process that does not answer at all (stopped): killed at the deadline, 1 s + the slack.
    {
      testing::ScopedEnv seconds("GENGRAPH_CHAT_TEMPLATE_SECONDS", "1");
      ASSERT_EQ(::kill(third, SIGSTOP), 0);
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(error_of(r, messages),
                name + " ran past 1 s and was stopped (tools/hf_tokenizer.py --serve, pid " +
                    std::to_string(third) + ", gave no answer within " +
                    std::to_string(1 + ChatRenderer::kSlackSeconds) +
                    " s; the next render starts it again)");
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(waited, 1.0 + ChatRenderer::kSlackSeconds - 0.1);
      EXPECT_LT(waited, 1.0 + ChatRenderer::kSlackSeconds + 10);
      EXPECT_EQ(r.pid(), 0);
      EXPECT_TRUE(reaped(third));
    }
    EXPECT_EQ(r.render(messages, true), want);
    EXPECT_EQ(r.starts(), 4);
    last = r.pid();
    ASSERT_GT(last, 0);
  }
  // Destroyed: its input closed, the process ended and reaped (no zombie left).
  EXPECT_TRUE(reaped(last));
  EXPECT_NE(::kill(last, 0), 0);
}

TEST(ChatRenderer, WhatCannotBeRenderedIsNamed) {
  TempDir dir;
  const fs::path folder = chat_folder(dir, nullptr);
  std::ostringstream log;
  ChatRenderer r(folder.string(), log);
  {
    testing::ScopedEnv bad("GENGRAPH_CHAT_TEMPLATE_SECONDS", "soon");
    EXPECT_THAT(error_of(r, conversation()),
                HasSubstr("GENGRAPH_CHAT_TEMPLATE_SECONDS: expected a whole number of seconds"));
    EXPECT_EQ(r.starts(), 0);
  }
  {
    testing::ScopedEnv python("GENGRAPH_PYTHON", (dir / "no-python").string());
    EXPECT_THAT(error_of(r, conversation()),
                HasSubstr("cannot start the tools' Python '" + (dir / "no-python").string() +
                          "' for the chat template of '" + folder.string() + "'"));
    EXPECT_EQ(r.pid(), 0);
  }
  EXPECT_THAT(error_of(r, conversation()),
              HasSubstr("the tokenizer in '" + folder.string() + "' has no chat template"));
  // A template that is not UTF-8 is named by file before any process starts.
  testing::write_file(folder / "chat_template.jinja", "{{ messages }}\xff");
  ChatRenderer other(folder.string(), log);
  EXPECT_THAT(error_of(other, conversation()),
              HasSubstr("chat_template.jinja': the chat template is not valid UTF-8"));
  EXPECT_EQ(other.starts(), 0);
}

// The set-up's real model (skipped where it is not set up): its own template, as transformers
// renders it.
TEST(ChatRenderer, RendersTheRealModelsTemplateAsTransformersDoes) {
  fs::path folder;
  try {
    folder = resolve_known_model("smollm2-135m");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  TempDir dir;
  const nlohmann::json messages = conversation();
  // Without a system message the template puts its own first.
  const nlohmann::json user_only = nlohmann::json::array({messages[1]});
  const auto want = transformers_render(
      dir, folder, nlohmann::json::array({{messages, true}, {user_only, true}, {messages, false}}));
  std::ostringstream log;
  ChatRenderer r(folder.string(), log);
  const std::string prompt = r.render(messages, true);
  EXPECT_EQ(prompt, want[0]);
  EXPECT_THAT(prompt, HasSubstr("<|im_start|>system\nYou answer in words w2 to w95.<|im_end|>"));
  // The native renderer gives the same texts, with no Python process.
  const auto native = NativeChat::for_model(folder);
  ASSERT_TRUE(native);
  EXPECT_EQ(native->render(messages, true, "conversation 0"), want[0]);
  EXPECT_EQ(native->render(user_only, true, "conversation 1"), want[1]);
  EXPECT_EQ(native->render(messages, false, "conversation 2"), want[2]);
}

}  // namespace
}  // namespace gengraph
