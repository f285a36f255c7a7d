// Chat in the C++ Engine (Engine::chat, Engine::apply_chat_template): conversations rendered with
// the model's own template natively, encoded without special tokens and generated, giving the
// prompt the CLI's --chat path gives (TextCodec) and the tokens transformers' apply_chat_template(
// tokenize=True) gives (asked in a Python process of its own), on a small folder of two template
// families and on the set-up's SmolLM2 where it is set up. What cannot be chatted with is named.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/tools/text_io.h"
#include "framework/model/known_models.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;

// ChatML with the tokenizer's EOS after each turn, and the generation prompt.
constexpr const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif "
    "%}";

// Gemma's turn form: a system message folded into the first user turn, contents trimmed, the
// assistant as the model.
constexpr const char* kTurns =
    "{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + ' ' %}"
    "{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif "
    "%}{% for m in rest %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] "
    "}}\n{% if loop.first %}{{ first }}{% endif %}{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

// A character-level BPE (printable ASCII and the newline, one token each; <eos> special, <unk>
// for the rest; the model's other ids as tokens no text encodes to) that the native reader and
// transformers both read, with the template given.
std::string char_tokenizer() {
  nlohmann::ordered_json vocab = {{"<eos>", 0}, {"<unk>", 1}, {"\n", 2}};
  for (int c = 32; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 29;
  for (int i = 98; i < 160; ++i) vocab["<t" + std::to_string(i) + ">"] = i;  // gpt2-b's other ids
  const nlohmann::ordered_json t = {{"version", "1.0"},
                                    {"normalizer", nullptr},
                                    {"added_tokens",
                                     {{{"id", 0},
                                       {"content", "<eos>"},
                                       {"special", true},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false}}}},
                                    {"pre_tokenizer", nullptr},
                                    {"post_processor", nullptr},
                                    {"decoder", nullptr},
                                    {"model",
                                     {{"type", "BPE"},
                                      {"vocab", vocab},
                                      {"merges", nlohmann::json::array()},
                                      {"unk_token", "<unk>"}}}};
  return t.dump();
}

fs::path chat_folder(const TempDir& dir, const std::string& name, const char* chat_template) {
  const fs::path folder = dir / name;
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-b", folder);
  testing::write_file(folder / "tokenizer.json", char_tokenizer());
  testing::write_file(folder / "tokenizer_config.json",
                      R"({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>",
                          "unk_token": "<unk>"})");
  if (chat_template != nullptr) testing::write_file(folder / "chat_template.jinja", chat_template);
  return folder;
}

std::vector<nlohmann::json> conversations() {
  return nlohmann::json::parse(R"([
    [{"role": "system", "content": "w2 w3"}, {"role": "user", "content": " w5 w6 "},
     {"role": "assistant", "content": "w7"}, {"role": "user", "content": "w8\nw9"}],
    [{"role": "user", "content": "w10 w11 w12"}]])")
      .get<std::vector<nlohmann::json>>();
}

// transformers' apply_chat_template(tokenize=True, add_generation_prompt=True) token ids for each
// (folder, conversation), in one Python process.
std::vector<std::vector<int64_t>> transformers_ids(const TempDir& dir,
                                                   const nlohmann::json& cases) {
  testing::write_file(dir / "oracle_in.json", cases.dump());
  testing::write_file(dir / "oracle.py", R"(import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import AutoTokenizer
out = []
for folder, messages in json.load(open(sys.argv[1])):
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    r = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    out.append(list(r["input_ids"] if hasattr(r, "keys") else r))
json.dump(out, open(sys.argv[2], "w"))
)");
  const std::string py = std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python";
  const std::string cmd = "\"" + py + "\" \"" + (dir / "oracle.py").string() + "\" \"" +
                          (dir / "oracle_in.json").string() + "\" \"" +
                          (dir / "oracle_out.json").string() + "\"";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return nlohmann::json::parse(testing::read_file(dir / "oracle_out.json"))
      .get<std::vector<std::vector<int64_t>>>();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Both families: the Engine's prompt is the CLI's (TextCodec, natively, no note of a fallback),
// its ids transformers', and chat() generates what generate() does from those ids, with the text
// decoded without special tokens.
TEST(EngineChat, GivesTheClisPromptAndTransformersTokens) {
  TempDir dir;
  const auto convs = conversations();
  nlohmann::json cases = nlohmann::json::array();
  std::vector<fs::path> folders = {chat_folder(dir, "chatml", kChatMl),
                                   chat_folder(dir, "turns", kTurns)};
  for (const auto& f : folders)
    for (const auto& c : convs) cases.push_back({f.string(), c});
  const auto want = transformers_ids(dir, cases);
  size_t k = 0;
  for (const auto& folder : folders) {
    std::ostringstream log;
    const TextCodec codec(folder.string(), TokenizerChoice::Auto, log);
    const auto texts = codec.chat_conversations(convs);
    const auto ids = codec.encode(texts, false, "chat");
    EXPECT_EQ(log.str().find("transformers"), std::string::npos) << log.str();
    Engine engine(folder.string());
    for (size_t i = 0; i < convs.size(); ++i, ++k) {
      EXPECT_EQ(engine.apply_chat_template(convs[i]), texts[i]) << folder;
      EXPECT_EQ(ids[i], want[k]) << folder << " conversation " << i;
    }
    const nlohmann::json settings = {{"max_new_tokens", 3}, {"logit_bias", {{"0", 100}}}};
    // Short conversations for the model's 96 positions.
    const auto short_convs = nlohmann::json::parse(R"([[{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]])")
                                 .get<std::vector<nlohmann::json>>();
    const Generation g = engine.chat(short_convs, settings);
    const Generation from_ids = engine.generate(
        codec.encode(codec.chat_conversations(short_convs), false, "chat"), settings);
    ASSERT_EQ(g.outputs.size(), short_convs.size());
    for (size_t i = 0; i < short_convs.size(); ++i) {
      EXPECT_EQ(g.outputs[i][0].tokens, from_ids.outputs[i][0].tokens);
      EXPECT_EQ(g.outputs[i][0].text, engine.decode(g.outputs[i][0].tokens, true));
    }
    // The EOS (token 0, biased first) is left out of the text by default, kept when asked.
    EXPECT_EQ(g.outputs[0][0].tokens.front(), 0);
    EXPECT_EQ(g.outputs[0][0].text, "");
    nlohmann::json keep = settings;
    keep["skip_special_tokens"] = false;
    EXPECT_THAT(engine.chat(short_convs, keep).outputs[0][0].text, HasSubstr("<eos>"));
    // Streamed pieces add up to the text.
    std::string streamed;
    const Generation s = engine.chat({short_convs[0]}, {{"max_new_tokens", 4}},
                                     [&](int64_t, int64_t, const std::string& piece) {
                                       streamed += piece;
                                       return true;
                                     });
    EXPECT_EQ(streamed, s.outputs[0][0].text);
  }
}

TEST(EngineChat, WhatCannotBeChattedWithIsNamed) {
  TempDir dir;
  const auto convs = conversations();
  Engine preset("gpt2-tiny");
  EXPECT_THAT(error_of([&] { preset.chat(convs); }), HasSubstr("no chat template"));
  Engine none(chat_folder(dir, "none", nullptr).string());
  EXPECT_THAT(error_of([&] { none.chat(convs); }), HasSubstr("has no chat template"));
  Engine odd(chat_folder(dir, "odd", "{{ messages[0]['content'] | wordwrap(5) }}").string());
  EXPECT_THAT(error_of([&] { odd.chat(convs); }),
              HasSubstr("filter 'wordwrap' (line 1) is not rendered natively"));
  Engine engine(chat_folder(dir, "chatml", kChatMl).string());
  const auto bad = nlohmann::json::parse(R"([{"role": "tool", "content": "w2"}])");
  EXPECT_THAT(error_of([&] {
                engine.chat({convs[0], bad});
              }),
              HasSubstr("messages[1][0]: key 'role'"));
  EXPECT_THAT(error_of([&] {
                engine.chat(convs, {{"add_special_tokens", "no"}});
              }),
              HasSubstr("add_special_tokens: expected true or false"));
}

// An experiment's inputs: {messages: [...]}: each conversation rendered and encoded as Engine::chat
// does, the text without special tokens; bad conversations refused by key path.
TEST(EngineChat, AnExperimentTakesConversations) {
  TempDir dir;
  const fs::path folder = chat_folder(dir, "chatml", kChatMl);
  const std::string head = "model: {path: \"" + folder.string() + "\"}\n";
  testing::write_file(dir / "e.yaml", head +
                                          "inputs:\n  messages:\n"
                                          "    - [{role: system, content: s}, {role: user, "
                                          "content: 2}]\n"
                                          "    - [{role: user, content: hi}]\n"
                                          "generation: {max_new_tokens: 3}\n"
                                          "run: {warmup: 0, repeats: 1}\n");
  ASSERT_EQ(testing::run_quietly(dir / "e.yaml", dir / "r.json"), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(dir / "r.json"));
  const auto convs = nlohmann::json::parse(R"([
    [{"role": "system", "content": "s"}, {"role": "user", "content": "2"}],
    [{"role": "user", "content": "hi"}]])")
                         .get<std::vector<nlohmann::json>>();
  Engine engine(folder.string());
  const Generation g = engine.chat(convs, {{"max_new_tokens", 3}});
  EXPECT_EQ(doc["inputs"]["messages"], nlohmann::json(convs));
  for (size_t i = 0; i < convs.size(); ++i) {
    EXPECT_EQ(doc["inputs"]["chat_prompts"][i], engine.apply_chat_template(convs[i]));
    const auto& seq = doc["runs"][0]["outputs"][i]["sequences"][0];
    EXPECT_EQ(seq["tokens"], g.outputs[i][0].tokens);
    EXPECT_EQ(seq["text"], g.outputs[i][0].text);
  }
  const auto refused = [&](const std::string& inputs) {
    testing::write_file(dir / "bad.yaml", head + "inputs:\n" + inputs);
    return testing::cli_stderr({"validate", (dir / "bad.yaml").string()}).second;
  };
  EXPECT_THAT(
      refused("  messages:\n    - [{role: user, content: a}]\n    - [{role: tool, "
              "content: b}]\n"),
      HasSubstr("bad.yaml:5:7: inputs.messages[1][0]: key 'role': expected 'system', 'user' or "
                "'assistant', found \"tool\""));
  EXPECT_THAT(refused("  messages: [[{role: user, content: [a]}]]\n"),
              HasSubstr("inputs.messages[0][0]: key 'content': expected a string"));
  EXPECT_THAT(refused("  messages: [[{role: user}]]\n"),
              HasSubstr("inputs.messages[0][0]: key 'content' is missing"));
  EXPECT_THAT(refused("  messages: [[]]\n"),
              HasSubstr("inputs.messages[0]: expected at least one message"));
  EXPECT_THAT(refused("  messages: []\n"),
              HasSubstr("inputs.messages: expected a non-empty list of conversations"));
  EXPECT_THAT(refused("  messages: [[{role: user, content: a}]]\n  texts: [a]\n"),
              HasSubstr("exactly one of inputs.prompts"));
}

// The set-up's real model (skipped where it is not set up): transformers' chat tokens, the
// template's own system prompt included.
TEST(EngineChat, TheRealModelGivesTransformersChatTokens) {
  fs::path folder;
  try {
    folder = resolve_known_model("smollm2-135m");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  TempDir dir;
  const auto convs = nlohmann::json::parse(R"([
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]])");
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : convs) cases.push_back({folder.string(), c});
  const auto want = transformers_ids(dir, cases);
  Engine engine(folder.string());
  for (size_t i = 0; i < convs.size(); ++i) {
    EXPECT_EQ(engine.encode(engine.apply_chat_template(convs[i]), false), want[i]);
  }
  EXPECT_THAT(engine.apply_chat_template(convs[0]), HasSubstr("<|im_start|>system\n"));
  const Generation g =
      engine.chat(convs.get<std::vector<nlohmann::json>>(), {{"max_new_tokens", 4}});
  const Generation from_ids = engine.generate(want, {{"max_new_tokens", 4}});
  for (size_t i = 0; i < convs.size(); ++i)
    EXPECT_EQ(g.outputs[i][0].tokens, from_ids.outputs[i][0].tokens);
}

}  // namespace
}  // namespace gengraph
