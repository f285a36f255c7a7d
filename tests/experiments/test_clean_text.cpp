// Clean text out: special tokens left out with skip_special_tokens, and text that ends at the last
// whole character (a character the token limit cut is left out and reported, never shown as
// U+FFFD), in decoding, streaming, the results and gengraph generate.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/text/tokenizer.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using namespace testing::cli_names;  // NOLINT(build/namespaces)

// A byte-level BPE: "a", the bytes of 'é' (C3 A9) and of U+FFFD (EF BF BD) as one token each in
// their byte-level spelling, and a special token.
const char* const kByteLevel = R"({"version": "1.0", "normalizer": null,
  "added_tokens": [{"id": 7, "content": "<|im_end|>", "special": true, "single_word": false,
                    "lstrip": false, "rstrip": false, "normalized": false}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                    "use_regex": true},
  "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": false,
                                      "trim_offsets": false, "use_regex": true},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u00c3": 2, "\u00a9": 3, "\u00ef": 4,
                                     "\u00bf": 5, "\u00bd": 6}, "merges": []}})";

// SentencePiece style: byte-fallback tokens <0xC3> <0xA9> beside "a".
const char* const kByteFallback = R"({"version": "1.0", "normalizer": null, "added_tokens": [],
  "pre_tokenizer": null, "post_processor": null,
  "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
  "model": {"type": "BPE", "vocab": {"<0xC3>": 0, "<0xA9>": 1, "a": 2}, "merges": [],
            "byte_fallback": true}})";

const std::string kFffd = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> tokenizer(const TempDir& dir, const char* json) {
  write_file(dir / "tokenizer.json", json);
  return load_tokenizer_json(dir / "tokenizer.json");
}

std::pair<std::string, size_t> whole(const Tokenizer& t, const std::vector<int64_t>& ids,
                                     bool skip = false) {
  size_t cut = 99;
  std::string text = t.decode_whole(ids, skip, cut);
  return {text, cut};
}

TEST(CleanText, TextEndsAtTheLastWholeCharacter) {
  TempDir dir;
  const auto t = tokenizer(dir, kByteLevel);
  EXPECT_EQ(t->decode({0, 2}), "a" + kFffd);  // decode as transformers: the cut byte shows
  EXPECT_EQ(whole(*t, {0, 2}), std::make_pair(std::string("a"), size_t{1}));
  EXPECT_EQ(whole(*t, {0, 2, 3}), std::make_pair(std::string("a\xC3\xA9"), size_t{0}));
  EXPECT_EQ(whole(*t, {0, 4, 5}), std::make_pair(std::string("a"), size_t{2}));
  // A replacement character the tokens hold themselves stays.
  EXPECT_EQ(whole(*t, {0, 4, 5, 6}), std::make_pair("a" + kFffd, size_t{0}));
  EXPECT_EQ(whole(*t, {2, 0}), std::make_pair(kFffd + "a", size_t{0}));  // not at the end
  // Special tokens: kept, or left out (and a cut before one is still found).
  EXPECT_EQ(whole(*t, {0, 7}), std::make_pair(std::string("a<|im_end|>"), size_t{0}));
  EXPECT_EQ(whole(*t, {0, 2, 7}, true), std::make_pair(std::string("a"), size_t{1}));
  EXPECT_EQ(whole(*t, {}), std::make_pair(std::string(), size_t{0}));

  TempDir other;
  const auto f = tokenizer(other, kByteFallback);
  EXPECT_EQ(whole(*f, {2, 0}), std::make_pair(std::string("a"), size_t{1}));
  EXPECT_EQ(whole(*f, {2, 0, 1}), std::make_pair(std::string("a\xC3\xA9"), size_t{0}));
}

// A stream holds an incomplete character back until it completes, and drops it when the stream
// ends without it; its pieces add up to decode_whole.
TEST(CleanText, AStreamNeverShowsACutCharacter) {
  TempDir dir;
  const auto t = tokenizer(dir, kByteLevel);
  TextStream s(*t);
  EXPECT_EQ(s.push(0), "a");
  EXPECT_EQ(s.push(2), "");
  EXPECT_EQ(s.push(3), "\xC3\xA9");
  EXPECT_EQ(s.push(2), "");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.cut_bytes(), 1u);
  TextStream special(*t, /*skip_special_tokens=*/true);
  std::string text;
  for (const int64_t id : {0, 7, 1, 7}) text += special.push(id);
  text += special.finish();
  EXPECT_EQ(text, "ab");
  EXPECT_EQ(special.cut_bytes(), 0u);
}

// Engine::generate_text takes skip_special_tokens beside the generation settings; its text and
// its stream end at the last whole character.
TEST(CleanText, TheEngineSkipsSpecialTokensAndNeverShowsACutCharacter) {
  TempDir dir;
  const fs::path model = dir / "model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", model);
  write_file(model / "tokenizer.json", kByteLevel);
  Engine engine(model.string());
  const auto text = [&](const nlohmann::json& settings) {
    std::string streamed;
    const Generation g =
        engine.generate_text({"a"}, settings, [&](int64_t, int64_t, const std::string& piece) {
          streamed += piece;
          return true;
        });
    EXPECT_EQ(streamed, g.outputs[0][0].text);
    return g.outputs[0][0].text;
  };
  const nlohmann::json special = {{"max_new_tokens", 2}, {"logit_bias", {{"7", 100}}}};
  EXPECT_EQ(text(special), "<|im_end|><|im_end|>");
  nlohmann::json skip = special;
  skip["skip_special_tokens"] = true;
  EXPECT_EQ(text(skip), "");
  EXPECT_EQ(text({{"max_new_tokens", 1}, {"logit_bias", {{"4", 100}}}}), "");
  skip["skip_special_tokens"] = "yes";
  EXPECT_THAT(testing::error_of([&] { text(skip); }),
              HasSubstr("skip_special_tokens: expected true or false, found \"yes\""));
}

// The stream of pieces with their tokens: the tokens add up to the sequence's, each with its
// log-probability as the streamed ids have it.
TEST(CleanText, TextPiecesCarryTheirTokensLogprobs) {
  TempDir dir;
  const fs::path model = dir / "model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", model);
  write_file(model / "tokenizer.json", kByteLevel);
  Engine engine(model.string());
  std::vector<TextPiece> pieces;
  const Generation g = engine.generate_text({"a"},
                                            {{"max_new_tokens", 3},
                                             {"logit_bias", {{"1", 30}}},
                                             {"output_scores", true},
                                             {"skip_special_tokens", true}},
                                            TextPieceCallback([&](const TextPiece& p) {
                                              pieces.push_back(p);
                                              return true;
                                            }));
  std::vector<int64_t> tokens;
  std::string text;
  for (const auto& p : pieces) {
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
    text += p.text;
    ASSERT_EQ(p.logprobs.size(), p.tokens.size());
    for (double lp : p.logprobs) EXPECT_LE(lp, 0.0);
  }
  EXPECT_EQ(tokens, g.outputs[0][0].tokens);
  EXPECT_EQ(text, g.outputs[0][0].text);
  ASSERT_EQ(pieces.size(), 3u);
  for (const auto& p : pieces) EXPECT_EQ(p.text, "b");
}

// gengraph generate: the results' text keeps special tokens by default and leaves them out with
// --skip-special-tokens true; a cut character is left out of the text and counted in
// text_cut_bytes. The tokens are forced with logit_bias.
TEST(CleanText, GenerateSkipsSpecialTokensAndReportsACut) {
  TempDir dir;
  const fs::path model = dir / "model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", model);
  write_file(model / "tokenizer.json", kByteLevel);
  const auto generate = [&](const std::string& token, int n, const std::string& skip) {
    std::vector<std::string> args = {"generate",
                                     "--model",
                                     model.string(),
                                     "--text",
                                     "a",
                                     "--max-new-tokens",
                                     std::to_string(n),
                                     "--set",
                                     "generation.logit_bias={" + token + ": 100}",
                                     "--output",
                                     (dir / "r.json").string(),
                                     "--quiet"};
    if (!skip.empty()) args.insert(args.end(), {"--skip-special-tokens", skip});
    const auto [rc, err] = testing::cli_stderr(args);
    EXPECT_EQ(rc, 0) << err;
    const auto doc = nlohmann::json::parse(testing::read_file(dir / "r.json"));
    return doc["runs"][0]["outputs"][0]["sequences"][0];
  };
  EXPECT_EQ(generate("7", 2, "")["text"], "<|im_end|><|im_end|>");
  EXPECT_EQ(generate("7", 2, "true")["text"], "");
  const auto cut = generate("4", 1, "");
  EXPECT_EQ(cut["tokens"], nlohmann::json({4}));
  EXPECT_EQ(cut["text"], "");
  EXPECT_EQ(cut["text_cut_bytes"], 1);
  EXPECT_FALSE(generate("1", 1, "").contains("text_cut_bytes"));

  // Streamed text pieces carry the log-probabilities of the tokens they complete (several
  // prompts: a line per piece).
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"generate", "--model", model.string(), "--text", "a", "--text", "b",
                 "--max-new-tokens", "2", "--set", "generation.logit_bias={1: 100}", "--set",
                 "generation.output_scores=true", "--stream", "--quiet"}),
            0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("[0] \"b\" [")) << out;
  EXPECT_THAT(out, HasSubstr("[1] \"b\" [")) << out;
}

// transformers' tokenizer (tools/hf_tokenizer.py, "whole": true) ends each text at the last whole
// character and counts the cut as the native tokenizer does: every sequence of one to three tokens
// of a byte-level and a byte-fallback vocabulary (cut characters, invalid bytes before them, and
// U+FFFD spelled out by the tokens). gengraph generate --tokenizer python reports the cut too.
TEST(CleanText, ThePythonTokenizerEndsAtTheLastWholeCharacterToo) {
  TempDir dir;
  const fs::path model = dir / "model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", model);
  const std::string python = std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python";
  const std::string tool = std::string(GENGRAPH_SOURCE_DIR) + "/tools/hf_tokenizer.py";
  for (const auto& [json, vocab] :
       {std::make_pair(kByteLevel, 8), std::make_pair(kByteFallback, 3)}) {
    write_file(model / "tokenizer.json", json);
    std::vector<std::vector<int64_t>> seqs;
    for (int64_t a = 0; a < vocab; ++a) {
      seqs.push_back({a});
      for (int64_t b = 0; b < vocab; ++b) {
        seqs.push_back({a, b});
        for (int64_t c = 0; c < vocab; ++c) seqs.push_back({a, b, c});
      }
    }
    write_file(dir / "req.json",
               nlohmann::json{{"model", model.string()}, {"decode", seqs}, {"whole", true}}.dump());
    ASSERT_EQ(std::system((python + " " + tool + " --request " + (dir / "req.json").string() +
                           " --out " + (dir / "out.json").string())
                              .c_str()),
              0);
    const auto out = nlohmann::json::parse(testing::read_file(dir / "out.json"));
    const auto native = load_tokenizer_json(model / "tokenizer.json");
    size_t differ = 0, cuts = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto want = whole(*native, seqs[i]);
      cuts += want.second > 0;
      if ((out["texts"][i] != want.first || out["cut_bytes"][i] != want.second) && differ++ < 3) {
        ADD_FAILURE() << nlohmann::json(seqs[i]) << ": transformers " << out["texts"][i].dump()
                      << " cut " << out["cut_bytes"][i] << ", native "
                      << nlohmann::json(want.first).dump() << " cut " << want.second;
      }
    }
    EXPECT_EQ(differ, 0u) << vocab;
    EXPECT_GT(cuts, 10u) << vocab;
  }
  // Through gengraph generate: two <0xC3> tokens, the first invalid (kept), the second cut.
  const auto [rc, err] = testing::cli_stderr({"generate", "--model", model.string(), "--text", "a",
                                              "--tokenizer", "python", "--max-new-tokens", "2",
                                              "--set", "generation.logit_bias={0: 100}", "--output",
                                              (dir / "r.json").string(), "--quiet"});
  ASSERT_EQ(rc, 0) << err;
  const auto seq = nlohmann::json::parse(
      testing::read_file(dir / "r.json"))["runs"][0]["outputs"][0]["sequences"][0];
  EXPECT_EQ(seq["tokens"], nlohmann::json({0, 0}));
  EXPECT_EQ(seq["text"], kFffd);
  EXPECT_EQ(seq["text_cut_bytes"], 1);
}

}  // namespace
}  // namespace gengraph
