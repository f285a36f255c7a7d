// Hostile tokenizer files and chat templates (issue 49, third pass): each class planted, and what
// gengraph makes of it. Where the `tokenizers` library defines the result (an empty Split pattern),
// the expected ids come from it at test time (tools/tokenizer_oracle.py), not from this file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "framework/text/chat_template.h"
#include "framework/text/tokenizer.h"
#include "framework/text/tokenizer_pipeline.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

std::string python() { return std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python"; }
std::string tool(const std::string& name) {
  return std::string(GENGRAPH_SOURCE_DIR) + "/tools/" + name;
}

// A byte-level BPE file the `tokenizers` library reads as it is: GPT-2's 256 byte characters as
// tokens 0..255, the merge "a b" (token 256), and `pre_tokenizer` in front of a ByteLevel step
// without its regex.
nlohmann::json byte_level_file(const nlohmann::json& pre_tokenizer) {
  static const tokenizer_detail::ByteLevelTables tables;  // the native tokenizer's own table
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tables.byte_to_text[b]] = b;
  vocab["ab"] = 256;
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", false}};
  nlohmann::json steps = nlohmann::json::array();
  if (!pre_tokenizer.is_null()) steps.push_back(pre_tokenizer);
  steps.push_back(byte_level);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", steps}}},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", {"a b"}}}}};
}

nlohmann::json split(const nlohmann::json& pattern, const std::string& behavior, bool invert) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

std::string load_error(const nlohmann::json& doc, const fs::path& file) {
  testing::write_file(file, doc.dump());
  try {
    load_tokenizer_json(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string encode_error(const Tokenizer& tok, const std::string& text) {
  try {
    tok.encode(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// --- an empty String pattern ---------------------------------------------------------------------

// The library compiles {"String": ""} as the empty regular expression: an empty match before every
// character, so Split cuts the text into characters (every behaviour; Removed with invert removes
// everything), Replace puts its content between characters. Before, the native reader left the
// text whole (768 ids where the library gave 3,036).
TEST(HostileTokenizer, AnEmptyStringPatternDoesWhatTheLibraryDoes) {
  TempDir dir;
  const std::vector<std::string> texts = {"abab", "ab cd ab", "caf\xC3\xA9 ab\xF0\x9F\x98\x80", "",
                                          "a"};
  {
    std::ofstream corpus(dir / "corpus.hex");
    for (const auto& t : texts) corpus << hex(t) << "\n";
  }
  std::vector<std::pair<std::string, nlohmann::json>> files;
  for (const char* behavior :
       {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    for (const bool invert : {false, true}) {
      files.push_back({std::string(behavior) + (invert ? "-inverted" : ""),
                       byte_level_file(split({{"String", ""}}, behavior, invert))});
    }
  }
  // (Not in front of ByteLevel: the library panics there, an index past the end of its
  // alignments.)
  auto replace = byte_level_file(nullptr);
  replace["pre_tokenizer"] = split({{"String", " "}}, "Isolated", false);
  replace["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "b"}};
  replace["decoder"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "-"}};
  files.push_back({"replace", replace});
  for (const auto& [name, doc] : files) {
    const fs::path file = dir / (name + ".json"), out = dir / (name + ".out.json");
    testing::write_file(file, doc.dump());
    const std::string cmd = "\"" + python() + "\" \"" + tool("tokenizer_oracle.py") +
                            "\" --tokenizer \"" + file.string() + "\" --corpus \"" +
                            (dir / "corpus.hex").string() + "\" --out \"" + out.string() +
                            "\" >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto expected = nlohmann::json::parse(testing::read_file(out));
    const auto tok = load_tokenizer_json(file);
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto want = expected["ids"][i].get<std::vector<int64_t>>();
      EXPECT_EQ(tok->encode(texts[i]), want) << name << ": " << JsonAt::quoted(texts[i]);
      EXPECT_EQ(tok->decode(want), expected["decoded"][i].get<std::string>()) << name;
    }
  }
  // What it means, besides: "abab" is 4 characters, not the merged "ab ab".
  const auto isolated = load_tokenizer_json(dir / "Isolated.json");
  EXPECT_EQ(isolated->encode("abab").size(), 4u);
}

// --- regular expressions that backtrack without end ---------------------------------------------

TEST(HostileTokenizer, ARegexPastTheMatchLimitIsNamedWithItsStepAndPattern) {
  TempDir dir;
  const auto doc = byte_level_file(split({{"Regex", "(.*a){25}"}}, "Isolated", false));
  testing::write_file(dir / "tokenizer.json", doc.dump());
  const auto tok = load_tokenizer_json(dir / "tokenizer.json");
  const std::string e = encode_error(*tok, std::string(60, 'a') + "b");
  EXPECT_THAT(e, HasSubstr("'" + (dir / "tokenizer.json").string() +
                           "': pre_tokenizer.pretokenizers[0] (Split): the regular expression "
                           "\"(.*a){25}\" could not be matched on a text of 61 bytes"))
      << e;
  EXPECT_THAT(e, HasSubstr("match limit exceeded")) << e;
  EXPECT_THAT(e, Not(HasSubstr("PCRE2 error -47"))) << e;
  // Past the JIT's stack, the interpreter takes over (before, pcre2_match ran the JIT code again:
  // "JIT stack limit reached"), within the same limits.
  testing::write_file(dir / "tokenizer.json",
                      byte_level_file(split({{"Regex", "(a|a)*[cd]"}}, "Isolated", false)).dump());
  const auto jit = load_tokenizer_json(dir / "tokenizer.json");
  const std::string j = encode_error(*jit, std::string(4000, 'a') + "b");
  EXPECT_THAT(j,
              HasSubstr("pre_tokenizer.pretokenizers[0] (Split): the regular expression "
                        "\"(a|a)*[cd]\" could not be matched on a text of 4001 bytes, from byte 0: "
                        "match limit exceeded"))
      << j;
}

// --- steps whose output runs away ---------------------------------------------------------------

TEST(HostileTokenizer, ANormalizerThatGrowsPastItsBoundIsRefusedNamingTheStep) {
  TempDir dir;
  auto doc = byte_level_file(nullptr);
  doc["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "NFC"}},
                         {{"type", "Replace"},
                          {"pattern", {{"String", "a"}}},
                          {"content", std::string(20000, 'b')}}}}};
  testing::write_file(dir / "tokenizer.json", doc.dump());
  const auto tok = load_tokenizer_json(dir / "tokenizer.json");
  // 100,000 characters would become 2 GB; refused when the output passes 1.6 MB.
  const std::string e = encode_error(*tok, std::string(100000, 'a'));
  EXPECT_THAT(e, HasSubstr("'" + (dir / "tokenizer.json").string() +
                           "': normalizer.normalizers[1] (Replace): the output grows past 1600000 "
                           "bytes for a text of 100000 bytes"))
      << e;
  // A few such characters stay within the bound (16 x the text, or the text + 4096 bytes).
  EXPECT_THAT(encode_error(*tok, "aa"), HasSubstr("grows past 4098 bytes"));
  EXPECT_EQ(encode_error(*tok, "xyz"), "");
  // The pieces between added tokens share one bound: many short pieces cannot each take the slack.
  doc["normalizer"] = {{"type", "Prepend"}, {"prepend", std::string(1000, 'p')}};
  doc["added_tokens"] = {{{"id", 257},
                          {"content", "<s>"},
                          {"special", true},
                          {"normalized", false},
                          {"lstrip", false},
                          {"rstrip", false},
                          {"single_word", false}}};
  testing::write_file(dir / "tokenizer.json", doc.dump());
  const auto prepend = load_tokenizer_json(dir / "tokenizer.json");
  EXPECT_EQ(encode_error(*prepend, "x<s>y"), "");
  std::string many;
  for (int i = 0; i < 100; ++i) many += "x<s>";
  EXPECT_THAT(encode_error(*prepend, many),
              HasSubstr("normalizer (Prepend): the output grows past 6400 bytes for a text of "
                        "400 bytes"));
}

TEST(HostileTokenizer, PreTokenizersAndDecodersThatGrowPastTheBoundAreRefused) {
  TempDir dir;
  // Each ByteLevel step doubles a non-ASCII text: 30 of them would make 2^30 times the text.
  auto doc = byte_level_file(nullptr);
  nlohmann::json steps = nlohmann::json::array();
  for (int i = 0; i < 30; ++i) steps.push_back(doc["decoder"]);
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  testing::write_file(dir / "tokenizer.json", doc.dump());
  const auto tok = load_tokenizer_json(dir / "tokenizer.json");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "\xC3\xA9";
  const std::string e = encode_error(*tok, text);
  EXPECT_THAT(e, HasSubstr("': pre_tokenizer.pretokenizers[4] (ByteLevel): the output grows past "
                           "32000 bytes for a text of 2000 bytes"))
      << e;

  // A Replace decoder of one character by 20,000: decode's output is bounded alike.
  doc = byte_level_file(nullptr);
  doc["decoder"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(20000, 'z')}};
  testing::write_file(dir / "tokenizer.json", doc.dump());
  const auto replace = load_tokenizer_json(dir / "tokenizer.json");
  try {
    replace->decode(std::vector<int64_t>(1000, 'a'));
    ADD_FAILURE() << "a decode of 20 MB was made";
  } catch (const Error& err) {
    EXPECT_THAT(std::string(err.what()),
                HasSubstr("decoder (Replace): the output grows past 16000 bytes"));
  }
  EXPECT_EQ(replace->decode({'b', 'c'}), "bc");
}

// --- added tokens' ids ---------------------------------------------------------------------------

TEST(HostileTokenizer, AddedTokensWithIdsTheLibraryWouldNotGiveAreRefused) {
  TempDir dir;
  auto with_ids = [&](const std::vector<int64_t>& ids) {
    auto doc = byte_level_file(nullptr);
    doc["added_tokens"] = nlohmann::json::array();
    for (size_t k = 0; k < ids.size(); ++k) {
      doc["added_tokens"].push_back({{"id", ids[k]},
                                     {"content", "<t" + std::to_string(k) + ">"},
                                     {"special", true},
                                     {"normalized", false}});
    }
    return load_error(doc, dir / "tokenizer.json");
  };
  EXPECT_EQ(with_ids({257, 258, 259, 260}), "");
  const std::string file = "'" + (dir / "tokenizer.json").string() + "'";
  EXPECT_EQ(with_ids({257, 258, 259, -1}),
            file +
                ": key 'added_tokens[3].id': expected a token id from 0 to 260 (the model's 257 "
                "entries and 4 added tokens), found -1");
  EXPECT_THAT(with_ids({257, 258, 259, 1000000000}),
              HasSubstr(file + ": key 'added_tokens[3].id': expected a token id from 0 to 260"));
  // In range, but not the id the token gets: the library would renumber it silently.
  EXPECT_EQ(with_ids({257, 259, 258}),
            file +
                ": key 'added_tokens[1].id': expected 258, the id this token gets (its id in the "
                "model's vocabulary, else the next after the model's entries and the added "
                "tokens before it), found 259");
  auto doc = byte_level_file(nullptr);
  doc["added_tokens"] = {{{"content", "<x>"}, {"special", true}}};
  EXPECT_THAT(load_error(doc, dir / "tokenizer.json"),
              HasSubstr("key 'added_tokens[0].id': expected a token id from 0 to 257"));
}

// --- a tokenizer.model that is none --------------------------------------------------------------

TEST(HostileTokenizer, AGarbageSentencePieceModelIsSaidToBeNone) {
  TempDir dir;
  for (const std::string& bytes :
       {std::string("this is not a model\n"), std::string("\x0a\xff\xff\xff\x0f garbage", 14),
        std::string()}) {
    testing::write_file(dir / "tokenizer.model", bytes);
    std::string e;
    try {
      load_sentencepiece_model(dir / "tokenizer.model", true);
    } catch (const Error& err) {
      e = err.what();
    }
    if (e.find("AddressSanitizer") != std::string::npos) {
      GTEST_SKIP() << "SentencePiece models are not loaded in this build: " << e;
    }
    EXPECT_THAT(
        e, HasSubstr("'" + (dir / "tokenizer.model").string() + "' is not a SentencePiece model ("))
        << e;
    for (const char* raw : {"ParseFrom", "INTERNAL", "model_proto", ".cc("}) {
      EXPECT_THAT(e, Not(HasSubstr(raw))) << e;
    }
  }
}

// --- chat templates, read and checked in C++ ----------------------------------------------------

std::string chat_error(const fs::path& folder) {
  try {
    read_chat_template(folder);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HostileChatTemplate, TemplatesThatAreNotUtf8AreNamedWithTheByteOffset) {
  TempDir dir;
  testing::write_file(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  auto t = read_chat_template(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->text, "{{ messages }}");
  EXPECT_EQ(t->source, "'" + (dir / "tokenizer_config.json").string() + "', key 'chat_template'");

  testing::write_file(dir / "chat_template.jinja", "{{ messages }}\xff\xfe");
  EXPECT_EQ(chat_error(dir.path()), "'" + (dir / "chat_template.jinja").string() +
                                        "': the chat template is not valid UTF-8: byte 14 (0xFF) "
                                        "does not begin or continue a character");
  fs::remove(dir / "chat_template.jinja");

  testing::write_file(dir / "tokenizer_config.json", "{\"chat_template\": \"ab\xc3(\"}");
  EXPECT_EQ(chat_error(dir.path()), "'" + (dir / "tokenizer_config.json").string() +
                                        "': key 'chat_template': the chat template is not valid "
                                        "UTF-8: byte 21 (0xC3) of the file does not begin or "
                                        "continue a character");
  testing::write_file(
      dir / "tokenizer_config.json",
      "{\"chat_template\": [{\"name\": \"default\", \"template\": \"x\xe2\x82\"}]}");
  EXPECT_THAT(chat_error(dir.path()), HasSubstr("key 'chat_template[0].template': the chat "
                                                "template is not valid UTF-8: byte 53 (0xE2)"));
  testing::write_file(dir / "tokenizer_config.json",
                      "{\"bos\": \"\xff\", \"chat_template\": \"x\"}");
  EXPECT_THAT(chat_error(dir.path()), HasSubstr("tokenizer_config.json' is not valid UTF-8: byte 9 "
                                                "(0xFF)"));
  // Too big to be a template.
  testing::write_file(dir / "tokenizer_config.json", "{}");
  fs::create_directories(dir / "additional_chat_templates");
  testing::write_file(dir / "additional_chat_templates/tool_use.jinja", "ok");
  EXPECT_FALSE(read_chat_template(dir.path()).has_value());
  testing::write_file(dir / "chat_template.jinja", std::string(kMaxChatTemplateBytes + 1, 'x'));
  EXPECT_THAT(chat_error(dir.path()),
              HasSubstr("chat_template.jinja' is " + std::to_string(kMaxChatTemplateBytes + 1) +
                        " bytes, more than the "));
}

// --- the Python tokenizer and the chat template, through the CLI --------------------------------

// A model folder (the gpt2-a fixture, whose tokenizer texts are encoded before the model loads)
// with the word-level test tokenizer, which the native reader refuses, so tools/hf_tokenizer.py
// runs.
fs::path python_tokenizer_folder(const TempDir& dir) {
  const fs::path folder = dir / "model";
  testing::make_folder_with_test_tokenizer("gpt2-a", folder, 96);
  return folder;
}

// A pattern the native reader refuses (an anchor) goes to the Python tokenizer, where Oniguruma
// gives up on it and the `tokenizers` library panics: named by file, key and pattern, with no Rust
// trace.
TEST(HostileTokenizer, APanicOfThePythonTokenizerNamesTheFileAndPattern) {
  TempDir dir;
  const fs::path folder = python_tokenizer_folder(dir);
  auto doc = byte_level_file(split({{"Regex", "^(.*a){25}"}}, "Isolated", false));
  testing::write_file(folder / "tokenizer.json", doc.dump());
  fs::remove(folder / "tokenizer_config.json");
  const auto [rc, err] =
      testing::cli_stderr({"generate", "--model", folder.string(), "--text",
                           std::string(70, 'a') + "b", "--max-new-tokens", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("text 0: '" + (folder / "tokenizer.json").string() +
                             "': pre_tokenizer.pretokenizers[0].pattern: the regular expression "
                             "\"^(.*a){25}\" could not be matched: it backtracks past the limit"))
      << err;
  for (const char* raw : {"panicked", "PanicException", "Traceback", "RUST_BACKTRACE", "onig"}) {
    EXPECT_THAT(err, Not(HasSubstr(raw))) << err;
  }
}

// The Python tokenizer (--tokenizer python, or a file the native reader refuses) keeps the same
// bound: each step alone, in chunks, before the library builds the whole output.
TEST(HostileTokenizer, TheGrowthBoundHoldsInThePythonTokenizerToo) {
  TempDir dir;
  const fs::path folder = python_tokenizer_folder(dir);
  auto doc = byte_level_file(nullptr);
  doc["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "NFC"}},
                         {{"type", "Replace"},
                          {"pattern", {{"String", "a"}}},
                          {"content", std::string(20000, 'b')}}}}};
  testing::write_file(folder / "tokenizer.json", doc.dump());
  fs::remove(folder / "tokenizer_config.json");
  const auto [rc, err] =
      testing::cli_stderr({"generate", "--model", folder.string(), "--tokenizer", "python",
                           "--text", std::string(2000, 'a'), "--max-new-tokens", "1", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("text 0: '" + (folder / "tokenizer.json").string() +
                             "': normalizer.normalizers[1] (Replace): the output grows past 32000 "
                             "bytes for a text of 2000 bytes"))
      << err;
}

TEST(HostileChatTemplate, AChatTemplateNotInUtf8IsNamedNotCalledNoTokenizer) {
  TempDir dir;
  const fs::path folder = python_tokenizer_folder(dir);
  testing::write_file(folder / "chat_template.jinja", "{{ messages[0]['content'] }}\xc3(");
  const auto [rc, err] = testing::cli_stderr(
      {"generate", "--model", folder.string(), "--chat", "--text", "w5", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("'" + (folder / "chat_template.jinja").string() +
                             "': the chat template is not valid UTF-8: byte 28 (0xC3)"))
      << err;
  EXPECT_THAT(err, Not(HasSubstr("no usable tokenizer"))) << err;
  // The Python tool, asked directly, says the same.
  testing::write_file(dir / "req.json",
                      nlohmann::json{{"model", folder.string()}, {"encode", {"w5"}}}.dump());
  const std::string cmd = "\"" + python() + "\" \"" + tool("hf_tokenizer.py") + "\" --request \"" +
                          (dir / "req.json").string() + "\" --out \"" +
                          (dir / "out.json").string() + "\" 2> \"" + (dir / "err.txt").string() +
                          "\"";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_THAT(testing::read_file(dir / "err.txt"),
              HasSubstr("chat_template.jinja': the chat template is not valid UTF-8: byte 28 "
                        "(0xC3)"));
}

// A template that runs without end, and one whose output is 100 MB: each stopped and named while it
// renders (the limits: GENGRAPH_CHAT_TEMPLATE_SECONDS, 1,000,000 + 4 x the text's characters).
TEST(HostileChatTemplate, ARunawayChatTemplateIsStoppedAndNamed) {
  TempDir dir;
  const fs::path folder = python_tokenizer_folder(dir);
  const std::string template_file = (folder / "chat_template.jinja").string();
  testing::write_file(folder / "chat_template.jinja",
                      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                      "{% endfor %}{{ messages[0]['content'] }}");
  {
    testing::ScopedEnv seconds("GENGRAPH_CHAT_TEMPLATE_SECONDS", "2");
    const auto [rc, err] = testing::cli_stderr(
        {"generate", "--model", folder.string(), "--chat", "--text", "w5", "--quiet"});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("the chat template of '" + folder.string() + "' ('" + template_file +
                               "') ran past 2 s on text 0"))
        << err;
  }
  testing::write_file(folder / "chat_template.jinja", "{{ 'x' * 100000000 }}");
  auto [rc, err] = testing::cli_stderr(
      {"generate", "--model", folder.string(), "--chat", "--text", "w5", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("the chat template of '" + folder.string() + "' ('" + template_file +
                             "') rendered more than 1000008 characters"))
      << err;
  EXPECT_THAT(err, Not(HasSubstr("accepted for a JSON file"))) << err;
  // Output built up piece by piece is bounded the same way.
  testing::write_file(folder / "chat_template.jinja",
                      "{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}");
  std::tie(rc, err) = testing::cli_stderr(
      {"generate", "--model", folder.string(), "--chat", "--text", "w5", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("rendered more than 1000008 characters (the template's output)"))
      << err;
  // A bad limit is named.
  testing::ScopedEnv bad("GENGRAPH_CHAT_TEMPLATE_SECONDS", "soon");
  std::tie(rc, err) = testing::cli_stderr(
      {"generate", "--model", folder.string(), "--chat", "--text", "w5", "--quiet"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("GENGRAPH_CHAT_TEMPLATE_SECONDS: expected a whole number of seconds"))
      << err;
}

}  // namespace
}  // namespace gengraph
